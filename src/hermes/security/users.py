"""Users and service accounts: a JSON file in the data directory (``security/users.json``, mode 0600) that
``hermes users`` edits and the running processes re-read when it changes. Each entry has an optional
password hash (none: the name can only sign in with a bearer token whose subject it is), roles, and the
owner ids whose topics and subscriptions it manages: the file is also the plain owner source."""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hermes.errors import UsageError

ADMIN = "admin"


@dataclass(frozen=True)
class User:
    name: str
    password_hash: str | None = None
    roles: frozenset[str] = frozenset()
    owners: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, object]:
        return {"password": self.password_hash, "roles": sorted(self.roles), "owners": sorted(self.owners)}

    @classmethod
    def from_json(cls, name: str, data: dict[str, object]) -> User:
        password = data.get("password")
        roles, owners = data.get("roles", []), data.get("owners", [])
        assert isinstance(roles, list) and isinstance(owners, list)
        return cls(name, password if isinstance(password, str) else None, frozenset(roles), frozenset(owners))


@dataclass
class UserStore:
    """The users file. Lookups re-read it when its modification time changed, at most once a second."""

    path: Path
    recheck: float = 1.0
    _users: dict[str, User] = field(default_factory=dict)
    _version: tuple[int, int] | None = None
    _checked: float = float("-inf")

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> UserStore:
        return cls(data_dir / "security" / "users.json")

    def get(self, name: str) -> User | None:
        return self.users().get(name)

    def users(self) -> dict[str, User]:
        now = time.monotonic()
        if now - self._checked >= self.recheck:
            self._checked = now
            self._reload()
        return self._users

    def _reload(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._users, self._version = {}, None
            return
        version = (stat.st_mtime_ns, stat.st_size)
        if version == self._version:
            return
        try:
            data = json.loads(self.path.read_text())
            self._users = {name: User.from_json(name, entry) for name, entry in data["users"].items()}
        except (ValueError, KeyError, AssertionError, AttributeError) as exc:
            raise UsageError(f"the users file {self.path} is damaged ({exc}); fix or remove it") from None
        self._version = version

    def save(self, user: User) -> None:
        self._write({**self._fresh(), user.name: user})

    def remove(self, name: str) -> bool:
        users = self._fresh()
        if users.pop(name, None) is None:
            return False
        self._write(users)
        return True

    def _fresh(self) -> dict[str, User]:
        self._checked, self._version = float("-inf"), None
        return dict(self.users())

    def _write(self, users: dict[str, User]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = json.dumps({"users": {name: users[name].to_json() for name in sorted(users)}}, indent=2)
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".users.")  # created 0600
        with os.fdopen(fd, "w") as file:
            file.write(body + "\n")
        os.replace(temporary, self.path)
        self._checked, self._version = float("-inf"), None

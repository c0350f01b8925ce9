"""Secrets at rest: the metadata store keeps a subscription's endpoint when it carries a password, its OAuth
password and signing secrets, and an OAuth provider's client secret encrypted (Fernet: AES-128-CBC and
HMAC-SHA256, ``cryptography``), under keys kept apart from the store: ``HERMES_SECRETS_KEYS`` (comma-separated),
else the key file ``<data dir>/security/secrets.key`` (0600, one key a line), made when the first secret is
stored. The first key encrypts, every key decrypts, so a rotation puts a new key first, re-seals what is
stored (``reseal``) and then drops the old one (docs/security.md). Values stored in plain text by earlier
versions still load, and are sealed by the next ``reseal`` (management runs one at start)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import orjson
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from hermes.errors import MetadataUnavailable, UsageError

KEYS_VARIABLE = "HERMES_SECRETS_KEYS"
SEALED = "hermes-sealed:"  # before a Fernet token: the rest of the value is encrypted
_RECHECK = 1.0  # seconds between looks at the key file's modification time

Json = dict[str, Any]
log = logging.getLogger(__name__)


def key_file(data_dir: Path) -> Path:
    return data_dir / "security" / "secrets.key"


@dataclass
class SecretKeys:
    """The keys, from the variable (``variable``: its value) or the key file, which is re-read when it changes
    (another process rotated it) and made on the first ``current()`` when missing."""

    path: Path
    fixed: list[bytes] | None = None  # from the variable
    _keys: list[bytes] = field(default_factory=list)
    _version: tuple[int, int] | None = None
    _checked: float = float("-inf")

    @classmethod
    def for_data_dir(cls, data_dir: Path) -> SecretKeys:
        variable = os.environ.get(KEYS_VARIABLE)
        return cls(key_file(data_dir), _parse(variable.split(","), KEYS_VARIABLE) if variable else None)

    def keys(self) -> list[bytes]:
        if self.fixed is not None:
            return self.fixed
        now = time.monotonic()
        if now - self._checked >= _RECHECK:
            self._checked = now
            self._reload()
        return self._keys

    def current(self) -> list[bytes]:
        """The keys, the one that encrypts first; a key file is made when there is none."""
        keys = self.keys()
        if not keys and self.fixed is None:
            self.write([Fernet.generate_key()], exclusive=True)
            keys = self.keys()
        return keys

    def write(self, keys: list[bytes], exclusive: bool = False) -> None:
        """Replaces the key file (0600, in a 0700 directory); ``exclusive``: only if there is none yet."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        body = b"".join(key + b"\n" for key in keys)
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
        if exclusive:
            try:
                os.link(temporary, self.path)  # two processes making the first key: one wins, both use it
            except FileExistsError:
                pass
            finally:
                temporary.unlink()
        else:
            os.replace(temporary, self.path)
        self.refresh()

    def refresh(self) -> None:
        """Re-read the key file at the next look (a value did not decrypt: another process may have rotated it)."""
        self._checked, self._version = float("-inf"), None

    def _reload(self) -> None:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._keys, self._version = [], None
            return
        version = (stat.st_mtime_ns, stat.st_size)
        if version != self._version:
            self._keys = _parse(self.path.read_text().splitlines(), str(self.path))
            self._version = version


def new_key() -> str:
    return Fernet.generate_key().decode()


def rotate(data_dir: Path) -> Path:
    """Puts a new key first in the key file (the old ones stay, to decrypt until ``reseal`` has run)."""
    keys = SecretKeys.for_data_dir(data_dir)
    if keys.fixed is not None:
        raise UsageError(
            f"the keys come from {KEYS_VARIABLE}: put a new key (hermes secrets key) first in it for every process, "
            "restart them, then run hermes secrets reseal"
        )
    keys.write([new_key().encode(), *keys.keys()])
    return keys.path


def _parse(lines: list[str], where: str) -> list[bytes]:
    keys = [line.strip().encode() for line in lines if line.strip()]
    for key in keys:
        try:
            Fernet(key)
        except ValueError:
            raise UsageError(f"{where} holds a key that is not a Fernet key (32 url-safe base64 bytes)") from None
    return keys


class StoredSecrets:
    """Seals and unseals the secret values of the stored JSON of subscriptions and OAuth providers."""

    def __init__(self, keys: SecretKeys) -> None:
        self._keys = keys

    def _fernet(self, keys: list[bytes]) -> MultiFernet:
        return MultiFernet([Fernet(key) for key in keys])

    def seal(self, value: str) -> str:
        return SEALED + self._fernet(self._keys.current()).encrypt(value.encode()).decode()

    def unseal(self, value: str) -> str:
        if not value.startswith(SEALED):
            return value  # stored in plain text by an earlier version
        token = value[len(SEALED) :].encode()
        for attempt in range(2):
            keys = self._keys.keys()
            if not keys:
                _missing(self._keys)
            try:
                return self._fernet(keys).decrypt(token).decode()
            except InvalidToken:
                if attempt == 0:
                    self._keys.refresh()
        raise MetadataUnavailable(
            f"a stored secret does not decrypt with the keys of {_where(self._keys)}: give every process "
            f"the keys of the process that stored it (docs/security.md, Secrets at rest)"
        )

    def sealed_with_current_key(self, value: str) -> bool:
        if not value.startswith(SEALED):
            return False
        current = Fernet(self._keys.current()[0])
        try:
            current.decrypt(value[len(SEALED) :].encode())
        except InvalidToken:
            return False
        return True

    # --- the stored JSON ---

    def seal_subscription(self, data: Json) -> Json:
        return _walk_subscription(data, self.seal)

    def unseal_subscription(self, data: Json) -> Json:
        return _walk_subscription(data, self.unseal)

    def seal_provider(self, data: Json) -> Json:
        return {**data, "clientSecret": self.seal(data["clientSecret"])}

    def unseal_provider(self, data: Json) -> Json:
        return {**data, "clientSecret": self.unseal(data["clientSecret"])}

    def reseal_subscription(self, what: str, body: bytes) -> bytes | None:
        """The stored ``body`` sealed with the current key; None when it already is, or when it is no JSON object
        (warned of, naming ``what``): no process can read a secret of it, so there is none to seal."""
        if (data := _stored_object(what, body)) is None:
            return None
        secrets = _subscription_secrets(data)
        return _dumped(self._reseal(data, self.unseal_subscription, self.seal_subscription, secrets))

    def reseal_provider(self, what: str, body: bytes) -> bytes | None:
        if (data := _stored_object(what, body)) is None:
            return None
        return _dumped(self._reseal(data, self.unseal_provider, self.seal_provider, [data["clientSecret"]]))

    def _reseal(
        self, data: Json, unseal: Callable[[Json], Json], seal: Callable[[Json], Json], values: list[str]
    ) -> Json | None:
        if all(self.sealed_with_current_key(value) for value in values):
            return None
        return seal(unseal(data))


def _stored_object(what: str, body: bytes) -> Json | None:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        return data
    log.warning("%s as stored is no JSON object: its secrets are not resealed; correct it or delete it", what)
    return None


def _dumped(data: Json | None) -> bytes | None:
    return None if data is None else orjson.dumps(data)


def _missing(keys: SecretKeys) -> NoReturn:
    raise MetadataUnavailable(
        f"stored secrets are encrypted and {_where(keys)} has no key: copy the key file of the process that stored "
        f"them, or set {KEYS_VARIABLE} (docs/security.md, Secrets at rest)"
    )


def _where(keys: SecretKeys) -> str:
    return KEYS_VARIABLE if keys.fixed is not None else str(keys.path)


def _has_password(endpoint: str) -> bool:
    try:
        return urlsplit(endpoint).password is not None
    except ValueError:
        return False


def _walk_subscription(data: Json, change: Callable[[str], str]) -> Json:
    out = dict(data)
    endpoint = out.get("endpoint")
    if isinstance(endpoint, str) and (endpoint.startswith(SEALED) or _has_password(endpoint)):
        out["endpoint"] = change(endpoint)
    policy = out.get("oAuthPolicy")
    if isinstance(policy, dict) and isinstance(policy.get("password"), str):
        out["oAuthPolicy"] = {**policy, "password": change(policy["password"])}
    if isinstance(out.get("signingSecrets"), list):
        out["signingSecrets"] = [change(secret) for secret in out["signingSecrets"]]
    return out


def _subscription_secrets(data: Json) -> list[str]:
    """The values ``_walk_subscription`` seals."""
    found: list[str] = []

    def keep(value: str) -> str:
        found.append(value)
        return value

    _walk_subscription(data, keep)
    return found

"""From an ``Authorization`` header to a ``Principal``: HTTP Basic against the users file, or a bearer JWT of
the configured issuer (its subject looked up in the same file for roles and owner ids)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

from hermes.errors import HermesError, Unauthorized
from hermes.security.passwords import VerifiedCache, hash_password, verify_password
from hermes.security.throttle import FailedLogins
from hermes.security.tokens import TokenVerifier
from hermes.security.users import ADMIN, User, UserStore
from hermes.tasks import name_os_thread


@dataclass(frozen=True)
class Principal:
    """Who is calling: a name, its roles and the owner ids whose topics and subscriptions it manages."""

    name: str
    roles: frozenset[str] = frozenset()
    owners: frozenset[str] = frozenset()
    signed_in: bool = True

    @property
    def is_admin(self) -> bool:
        return ADMIN in self.roles

    def owns(self, owner_id: str) -> bool:
        return self.is_admin or owner_id in self.owners


# What every caller is while authentication is off (loopback only): an admin, but one who did not sign in, so
# that read-only mode, which lets only admins who signed in change things, holds for it (docs/security.md).
OPEN = Principal("anonymous", frozenset({ADMIN}), signed_in=False)
# A caller of a public route while authentication is on: nobody.
ANONYMOUS = Principal("anonymous", signed_in=False)


class Authenticator:
    def __init__(self, users: UserStore, tokens: TokenVerifier | None, failures: FailedLogins) -> None:
        self.users = users
        self.tokens = tokens
        self.failures = failures
        self._verified = VerifiedCache()
        # Authorization headers verified a moment ago, by their keyed digest: the caller, the user entry it was
        # made from (a reload of the users file makes new entries, so changed roles or passwords miss) and until
        # when it holds (a bearer token: its expiry at the latest)
        self._callers: dict[bytes, tuple[Principal, User | None, float]] = {}
        # scrypt takes 128 MiB and a core: two checks at once, in threads of their own (the loop's default pool
        # serves everything else), and one at a time per client address, so that a flood from one address holds
        # one thread and a login from another address waits for one check at most
        self._hashing = ThreadPoolExecutor(2, thread_name_prefix="password-check", initializer=name_os_thread)
        self._clients: dict[str, tuple[asyncio.Lock, int]] = {}
        self._dummy: str | None = None

    @property
    def methods(self) -> list[str]:
        return ["Basic"] + (["Bearer"] if self.tokens is not None else [])

    async def authenticate(self, authorization: str | None, client: str) -> Principal:
        self.failures.check(client)
        if authorization is None:
            raise Unauthorized("authentication required")  # how HTTP clients ask first: not a failure
        known = self.known(authorization)
        if known is not None:
            return known
        scheme, _, credentials = authorization.partition(" ")
        user = "(bearer token)" if scheme.lower() == "bearer" else "(malformed)"
        try:
            with self.failures.attempt(client, self._verified.digest(authorization)):
                if scheme.lower() == "basic":
                    user, password = _basic_credentials(credentials.strip())
                    return await self._basic(user, password, client)
                if scheme.lower() == "bearer" and self.tokens is not None:
                    return await self._bearer(authorization, credentials.strip())
                user = f"({scheme[:16]})"
                raise Unauthorized(f"unsupported authorization scheme; use {' or '.join(self.methods)}")
        except Unauthorized:
            self.failures.failed(client, user)
            raise

    def known(self, authorization: str) -> Principal | None:
        """The caller, when its Basic credentials were verified a moment ago or its bearer token was verified and
        has not expired: answered without waiting (a digest and a look-up, no scrypt, no signature check). None:
        ``authenticate`` must check them."""
        key = self._verified.digest(authorization)
        hit = self._callers.get(key)
        if hit is not None:
            caller, made_from, expires = hit
            if self.users.get(caller.name) is made_from and expires > time.monotonic():
                return caller
            del self._callers[key]
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, password = _basic_credentials(credentials.strip())
        except Unauthorized:
            return None
        user = self.users.get(name)
        if user is None or user.password_hash is None or not self._verified.known(name, user.password_hash, password):
            return None
        caller = _principal(name, user)
        self._remember(key, caller, user, time.monotonic() + self._verified.ttl)
        return caller

    async def _bearer(self, authorization: str, token: str) -> Principal:
        assert self.tokens is not None
        name, expires = await self.tokens.verify(token)
        user = self.users.get(name)
        caller = _principal(name, user)
        ttl = min(expires - time.time(), self._verified.ttl)  # no longer than a Basic credential either
        if ttl > 0:
            self._remember(self._verified.digest(authorization), caller, user, time.monotonic() + ttl)
        return caller

    def _remember(self, key: bytes, caller: Principal, made_from: User | None, expires: float) -> None:
        if len(self._callers) >= self._verified.size:
            self._callers.clear()  # a flood of distinct credentials: start again rather than grow
        self._callers[key] = (caller, made_from, expires)

    async def _basic(self, name: str, password: str, client: str) -> Principal:
        user = self.users.get(name) if name else None
        encoded = user.password_hash if user is not None else None
        async with self._one_check_at_a_time(client):
            if encoded is not None and self._verified.known(name, encoded, password):
                return self._principal(name)  # verified while this request waited: one scrypt per credential
            loop = asyncio.get_running_loop()
            if encoded is None:  # hash anyway: the answer's timing must not tell which user names exist
                if self._dummy is None:
                    self._dummy = await loop.run_in_executor(self._hashing, hash_password, "")
                await loop.run_in_executor(self._hashing, verify_password, "\0" + password, self._dummy)
                raise Unauthorized("wrong user name or password")
            if not await loop.run_in_executor(self._hashing, verify_password, password, encoded):
                raise Unauthorized("wrong user name or password")
        self._verified.remember(name, encoded, password)
        return self._principal(name)

    @asynccontextmanager
    async def _one_check_at_a_time(self, client: str) -> AsyncIterator[None]:
        lock, waiting = self._clients.get(client, (asyncio.Lock(), 0))
        self._clients[client] = (lock, waiting + 1)
        try:
            async with lock:
                yield
        finally:
            lock, waiting = self._clients[client]
            if waiting == 1:
                del self._clients[client]
            else:
                self._clients[client] = (lock, waiting - 1)

    def _principal(self, name: str) -> Principal:
        return _principal(name, self.users.get(name))


def _principal(name: str, user: User | None) -> Principal:
    return Principal(name) if user is None else Principal(name, user.roles, user.owners)


def _basic_credentials(credentials: str) -> tuple[str, str]:
    """(name, password) of ``base64(name:password)``; a name of "" when the colon is missing."""
    try:
        name, separator, password = base64.b64decode(credentials, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthorized("malformed Basic credentials") from None
    return (name, password) if separator else ("", password)


def challenge(error: HermesError, methods: list[str]) -> dict[str, str]:
    """The headers of an authentication failure: how to authenticate, or when to try again."""
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        return {"Retry-After": str(max(1, round(retry_after)))}
    return {"WWW-Authenticate": ", ".join(f'{method} realm="hermes"' for method in methods)}

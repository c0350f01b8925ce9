"""Password hashes: scrypt (memory-hard, in the standard library), salted, in a self-describing string, and a
cache of recent successful checks so that a caller sending the same Basic credentials on every request pays
the ~50 ms of scrypt once, not per request."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from collections import OrderedDict

# OWASP's scrypt minimum (N=2^17, r=8, p=1): 128 MiB and ~0.1-0.3 s per check on one core.
_N, _R, _P = 2**17, 8, 1
_SCHEME = "scrypt"


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=256 * 1024 * 1024, dklen=32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def hash_password(password: str) -> str:
    """``scrypt$N$r$p$salt$hash`` with a fresh 16-byte salt."""
    salt = os.urandom(16)
    return "$".join([_SCHEME, str(_N), str(_R), str(_P), _b64(salt), _b64(_scrypt(password, salt, _N, _R, _P))])


def verify_password(password: str, encoded: str) -> bool:
    try:
        scheme, n, r, p, salt, expected = encoded.split("$")
        if scheme != _SCHEME:
            return False
        actual = _scrypt(password, base64.b64decode(salt), int(n), int(r), int(p))
    except ValueError:  # a damaged entry never matches
        return False
    return hmac.compare_digest(actual, base64.b64decode(expected))


class VerifiedCache:
    """Recently verified (user, password hash entry, password) triples. Keys are keyed BLAKE2 digests with a
    key that lives only in this process, so the cache holds nothing a memory dump could turn into a password
    faster than the scrypt hash itself; an entry expires after ``ttl`` seconds or when the hash changes."""

    def __init__(self, ttl: float = 300.0, size: int = 10_000) -> None:
        self.ttl = ttl
        self.size = size
        self._key = os.urandom(32)
        self._entries: OrderedDict[bytes, float] = OrderedDict()

    def digest(self, text: str) -> bytes:
        """A keyed digest of ``text``, for keys that must not hold credentials."""
        return hashlib.blake2b(text.encode(), key=self._key, digest_size=32).digest()

    def _digest(self, user: str, encoded: str, password: str) -> bytes:
        return self.digest("\0".join([user, encoded, password]))

    def known(self, user: str, encoded: str, password: str) -> bool:
        digest = self._digest(user, encoded, password)
        expires = self._entries.get(digest)
        if expires is None or expires <= time.monotonic():
            return False
        self._entries.move_to_end(digest)
        return True

    def remember(self, user: str, encoded: str, password: str) -> None:
        self._entries[self._digest(user, encoded, password)] = time.monotonic() + self.ttl
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)

"""Bearer tokens: OAuth 2 / OIDC JWTs signed by one configured issuer, checked against its JWKS. The key set
is cached for ``ttl`` seconds; a token naming a key id the cache lacks (the issuer rotated its keys) fetches it
again, but at most once per ``refetch_interval``, so tokens with made-up key ids cannot hammer the issuer.
While the issuer is unreachable, the last key set fetched stays in use."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
import jwt

from hermes.errors import ServiceUnavailable, Unauthorized

log = logging.getLogger(__name__)

# Asymmetric algorithms only: an HMAC algorithm would let anyone holding the public key sign tokens.
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})


class TokenVerifier:
    def __init__(
        self,
        issuer: str,
        jwks_url: str,
        audience: str | None = None,
        subject_claim: str = "sub",
        ttl: float = 300.0,
        refetch_interval: float = 10.0,
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.audience = audience
        self.subject_claim = subject_claim
        self.ttl = ttl
        self.refetch_interval = refetch_interval
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched = float("-inf")
        self._lock = asyncio.Lock()

    async def verify(self, token: str) -> tuple[str, float]:
        """The subject of a valid token and its expiry (``exp``, seconds since the epoch); ``Unauthorized`` for any
        other token."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthorized("the bearer token is not a JWT") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALGORITHMS:
            raise Unauthorized("the bearer token's signature algorithm is not accepted")
        key = await self._key(str(kid))
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[algorithm],
                issuer=self.issuer,
                audience=self.audience,
                options={"require": ["exp", "iss", self.subject_claim], "verify_aud": self.audience is not None},
                leeway=30,
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"the bearer token is not valid: {exc}") from None
        return str(claims[self.subject_claim]), float(claims["exp"])

    async def _key(self, kid: str) -> jwt.PyJWK:
        async with self._lock:
            age = time.monotonic() - self._fetched
            if age >= self.ttl or (kid not in self._keys and age >= self.refetch_interval):
                await self._fetch()
        key = self._keys.get(kid)
        if key is None:
            raise Unauthorized("the bearer token is signed with a key its issuer does not publish")
        return key

    async def _fetch(self) -> None:
        try:
            timeout = aiohttp.ClientTimeout(total=5)
            async with aiohttp.ClientSession(timeout=timeout) as session, session.get(self.jwks_url) as response:
                response.raise_for_status()
                keys = jwt.PyJWKSet.from_dict(await response.json(content_type=None)).keys
        except (aiohttp.ClientError, TimeoutError, ValueError, jwt.PyJWTError) as exc:
            self._fetched = time.monotonic() - self.ttl + self.refetch_interval  # try again soon, not per request
            if not self._keys:
                raise ServiceUnavailable(f"the token issuer's keys cannot be fetched from {self.jwks_url}") from None
            log.warning("fetching the token issuer's keys from %s failed (%s); using the last ones", self.jwks_url, exc)
            return
        self._keys = {str(key.key_id): key for key in keys}
        self._fetched = time.monotonic()

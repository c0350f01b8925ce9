"""Who may publish, as Hermes' frontend decides it. Credentials are those of the management API (the users file's
Basic passwords, the issuer's bearer tokens; a publisher's name is its user name or its token's subject).

With authentication on, every publish authenticates (``--publish-authentication required``), or only those that
send credentials (``optional``, Hermes' ``authNonRequired``); wrong credentials are a 401 either way. Then the
topic's ``auth`` decides: ``enabled`` false lets anyone publish; ``enabled`` true lets a caller named in
``publishers`` publish, and a caller without credentials only when ``unauthenticatedAccessEnabled``; anyone else
gets Hermes' 403 ``AUTH_ERROR``. With authentication off (loopback only) every caller is one without credentials.
"""

from __future__ import annotations

from typing import Final

from hermes.domain.topic import Topic
from hermes.errors import HermesError, PublishingForbidden, TooManyFailedLogins, Unauthorized
from hermes.security.authenticator import Authenticator, Principal, challenge


class Unchecked:
    """Credentials that must be checked before the publish goes on (``PublishAccess.identify``)."""


UNCHECKED: Final = Unchecked()
# A caller: a principal, or None for one without credentials.
Caller = Principal | None


class PublishAccess:
    def __init__(self, authenticator: Authenticator | None, required: bool) -> None:
        self.authenticator = authenticator
        self.required = required and authenticator is not None

    @property
    def methods(self) -> list[str]:
        return self.authenticator.methods if self.authenticator is not None else ["Basic"]

    def identify_now(self, authorization: str | None) -> Caller | Unchecked:
        """The caller when it is known without waiting (no credentials, or Basic credentials verified a moment
        ago); ``UNCHECKED`` otherwise. Raises ``Unauthorized`` when credentials are required and missing."""
        if self.authenticator is None:
            return None
        if authorization is None:
            if self.required:
                raise Unauthorized("authentication required")
            return None
        return self.authenticator.known(authorization) or UNCHECKED

    async def identify(self, authorization: str | None, client: str) -> Caller:
        if self.authenticator is None or (authorization is None and not self.required):
            return None
        return await self.authenticator.authenticate(authorization, client)

    def check(self, topic: Topic, caller: Caller) -> None:
        self.check_name(topic, None if caller is None else caller.name)

    @staticmethod
    def check_name(topic: Topic, name: str | None) -> None:
        """The topic's ``auth`` for a caller of that name (None: without credentials)."""
        auth = topic.auth
        if not auth.enabled:
            return
        allowed = auth.unauthenticated_access_enabled if name is None else name in auth.publishers
        if not allowed:
            raise PublishingForbidden("Permission denied.")

    def challenge(self, error: HermesError) -> tuple[tuple[str, str], ...]:
        """The headers of a refused authentication: how to authenticate, or when to try again."""
        if isinstance(error, Unauthorized | TooManyFailedLogins):
            return tuple(challenge(error, self.methods).items())
        return ()

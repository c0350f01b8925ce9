"""Whether a process authenticates its callers, and the rule that keeps an open one on loopback: a listener
reachable from other machines refuses to start while no credential source is configured."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from hermes.config import Settings
from hermes.errors import StartupError
from hermes.security.authenticator import Authenticator
from hermes.security.throttle import FailedLogins
from hermes.security.tokens import TokenVerifier
from hermes.security.users import UserStore


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # any other name may resolve to anything
        return False


@dataclass(frozen=True)
class Security:
    """``authenticator`` is None when authentication is off: no user in the users file and no token issuer."""

    authenticator: Authenticator | None
    users_file: str

    @classmethod
    def from_settings(cls, settings: Settings) -> Security:
        users = UserStore.in_data_dir(settings.data_dir)
        tokens = None
        if settings.auth_jwt_issuer is not None:
            jwks_url = settings.auth_jwt_jwks_url or settings.auth_jwt_issuer.rstrip("/") + "/.well-known/jwks.json"
            tokens = TokenVerifier(settings.auth_jwt_issuer, jwks_url, settings.auth_jwt_audience)
        if not users.users() and tokens is None:
            return cls(None, str(users.path))
        failures = FailedLogins(settings.auth_failed_logins_per_minute)
        return cls(Authenticator(users, tokens, failures), str(users.path))

    def check_listener(self, host: str, what: str) -> None:
        if self.authenticator is None and not is_loopback(host):
            raise StartupError(
                f"the {what} would listen on {host} without authentication: add a user first "
                f"(hermes users add NAME --admin), or give --auth-jwt-issuer, or listen on 127.0.0.1"
            )

    def describe(self) -> str:
        if self.authenticator is None:
            return "OFF: anyone who reaches the ports may do anything (allowed on loopback only)"
        return f"{' and '.join(self.authenticator.methods)} (users in {self.users_file})"

"""HTTP SCRAM authentication (RFC 7804) of the offload service, with SCRAM-SHA-512 and the Kafka users' passwords,
so that a client signs in to Kafka and to the offload service with one credential, as the protocol expects.

The exchange takes two requests: ``Authorization: SCRAM-SHA-512 data=<client-first>`` is answered 401 with
``WWW-Authenticate: SCRAM-SHA-512 sid=<sid>, data=<server-first>``; ``Authorization: SCRAM-SHA-512 sid=<sid>,
data=<client-final>`` is served when the proof holds, with ``Authentication-Info: sid=<sid>, data=<server-final>``;
a wrong proof is a 401 whose ``Authentication-Info`` carries SCRAM's error (``e=invalid-proof``), as RFC 7804 and
RFC 5802 have the server end a failed exchange. An unknown user goes through the same exchange against keys no
password matches, so that it fails the same way and the service does not tell which users exist. Exchanges left half
way are forgotten after a minute. Passwords are kept only as SCRAM's salted keys."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Any

from scramp import ScramException, ScramMechanism

MECHANISM = "SCRAM-SHA-512"
_ITERATIONS = 4096
_EXCHANGE_TTL = 60.0
_MAX_EXCHANGES = 10_000


@dataclass(frozen=True)
class Verdict:
    """``user`` when authenticated (``headers`` then go on the answer), else the 401's ``headers``."""

    user: str | None
    headers: tuple[tuple[str, str], ...]
    problem: str = ""


class HttpScram:
    def __init__(self, users: dict[str, str]) -> None:
        self._mechanism = ScramMechanism(MECHANISM)
        self._keys = {name: self._mechanism.make_auth_info(password, _ITERATIONS) for name, password in users.items()}
        self._decoy_secret = secrets.token_bytes(32)
        self._exchanges: dict[str, tuple[float, Any, str]] = {}

    def authenticate(self, authorization: str | None) -> Verdict:
        scheme, _, rest = (authorization or "").partition(" ")
        if scheme.upper() != MECHANISM:
            return _challenge("sign in with SCRAM-SHA-512 (RFC 7804) as a Kafka user")
        attributes = _attributes(rest)
        try:
            data = base64.b64decode(attributes.get("data", ""), validate=True).decode()
        except ValueError:
            return _challenge("the data attribute is not base64")
        sid = attributes.get("sid")
        if sid is None:
            return self._first(data)
        return self._final(sid, data)

    def _first(self, client_first: str) -> Verdict:
        named: list[str] = []  # the user the client names, as SCRAM's server looks it up

        def auth_info(username: str) -> Any:
            named.append(username)
            return self._auth_info(username)

        server = self._mechanism.make_server(auth_info)
        try:
            server.set_client_first(client_first)
            server_first = server.get_server_first()
        except ScramException:
            return _challenge("the SCRAM client-first message is malformed")
        now = time.monotonic()
        if len(self._exchanges) >= _MAX_EXCHANGES:
            self._forget_old(now)
        sid = secrets.token_urlsafe(16)
        self._exchanges[sid] = (now, server, named[0])
        return Verdict(None, ((("WWW-Authenticate", f"{MECHANISM} sid={sid}, data={_b64(server_first)}"),)))

    def _final(self, sid: str, client_final: str) -> Verdict:
        started, server, user = self._exchanges.pop(sid, (0.0, None, ""))
        if server is None or time.monotonic() - started > _EXCHANGE_TTL:
            return _challenge("unknown or expired SCRAM exchange: start again")
        try:
            server.set_client_final(client_final)
        except ScramException:
            refused = _challenge("wrong user name or password")
            if server.error is None:  # the message itself was malformed: no server-final to send
                return refused
            failed = ("Authentication-Info", f"sid={sid}, data={_b64(server.get_server_final())}")  # e=...
            return Verdict(None, (*refused.headers, failed), refused.problem)
        return Verdict(user, (("Authentication-Info", f"sid={sid}, data={_b64(server.get_server_final())}"),))

    def _auth_info(self, username: str) -> Any:
        keys = self._keys.get(username)
        if keys is None:  # keys no password matches, the same for the same name, as a real user's are
            salt, stored_key, server_key = (
                hmac.digest(self._decoy_secret, f"{part}:{username}".encode(), hashlib.sha512)
                for part in ("salt", "stored", "server")
            )
            return salt[:32], stored_key, server_key, _ITERATIONS
        return keys

    def _forget_old(self, now: float) -> None:
        for sid, (started, _, _) in list(self._exchanges.items()):
            if now - started > _EXCHANGE_TTL:
                del self._exchanges[sid]
        if len(self._exchanges) >= _MAX_EXCHANGES:
            self._exchanges.clear()


def _challenge(problem: str) -> Verdict:
    return Verdict(None, (("WWW-Authenticate", f'{MECHANISM} realm="hermes"'),), problem)


def _attributes(text: str) -> dict[str, str]:
    attributes = {}
    for part in text.split(","):
        name, _, value = part.strip().partition("=")
        attributes[name.strip().lower()] = value.strip().strip('"')
    return attributes


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()

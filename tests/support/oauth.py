"""A real OAuth 2 token endpoint and a real subscriber that demands its bearer tokens, both on
``SubscriberServer``: the endpoint issues short-lived tokens for registered clients (and resource owners) and
rejects bad credentials; the subscriber answers 401 to a missing, unknown, expired or revoked token."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from dataclasses import dataclass
from urllib.parse import parse_qsl

import orjson

from tests.support.subscriber import Received, Reply, SubscriberServer


@dataclass(frozen=True)
class TokenRequest:
    form: dict[str, str]
    content_type: str
    at: float  # time.monotonic() on arrival
    token: str | None  # what was issued, None when refused


class OAuthServer:
    def __init__(self, clients: dict[str, str], users: dict[str, str] | None = None, lifetime: float = 300.0) -> None:
        self.clients = clients  # client_id -> client_secret
        self.users = users or {}  # username -> password
        self.lifetime = lifetime
        self.accept_from = 1  # the subscriber rejects the tokens issued before this one (1-based)
        self.override: Reply | None = None  # the token endpoint answers this instead of issuing
        self.token_delay = 0.0  # seconds the token endpoint takes to answer
        self.requests: list[TokenRequest] = []
        self._accepted: list[Received] = []
        self._expiry: dict[str, float] = {}
        self._number: dict[str, int] = {}
        self._lock = threading.Lock()
        self.endpoint = SubscriberServer(self._token_endpoint)
        self.subscriber = SubscriberServer(self._protected)

    @property
    def token_url(self) -> str:
        return f"{self.endpoint.url}oauth2/token"

    def start(self) -> OAuthServer:
        self.endpoint.start()
        self.subscriber.start()
        return self

    def stop(self) -> None:
        self.endpoint.stop()
        self.subscriber.stop()

    @property
    def issued(self) -> list[str]:
        with self._lock:
            return [r.token for r in self.requests if r.token is not None]

    def revoke(self) -> None:
        with self._lock:
            self._expiry.clear()

    def delivered(self) -> list[Received]:
        """The subscriber requests it accepted."""
        with self._lock:
            return list(self._accepted)

    def valid(self, request: Received) -> bool:
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        with self._lock:
            return (
                token is not None
                and self._expiry.get(token, 0.0) > request.at
                and self._number[token] >= self.accept_from
            )

    def _protected(self, _n: int, request: Received) -> Reply:
        if self.valid(request):
            with self._lock:
                self._accepted.append(request)
            return Reply(200)
        return Reply(401, {"WWW-Authenticate": 'Bearer error="invalid_token"'})

    def _token_endpoint(self, _n: int, request: Received) -> Reply:
        form = dict(parse_qsl(request.body.decode()))
        token: str | None = None
        reply = self.override or self._grant(form)
        if reply.status == 200 and self.override is None:
            token = orjson.loads(reply.body)["access_token"]
        with self._lock:
            if token is not None:
                self._expiry[token] = time.monotonic() + self.lifetime
                self._number[token] = len(self._number) + 1
            self.requests.append(TokenRequest(form, request.headers.get("Content-Type", ""), request.at, token))
        return dataclasses.replace(reply, delay=self.token_delay)

    def _grant(self, form: dict[str, str]) -> Reply:
        if self.clients.get(form.get("client_id", "")) != form.get("client_secret"):
            return _json(401, {"error": "invalid_client"})
        grant = form.get("grant_type")
        if grant == "password":
            if self.users.get(form.get("username", "")) != form.get("password"):
                return _json(400, {"error": "invalid_grant"})
        elif grant != "client_credentials":
            return _json(400, {"error": "unsupported_grant_type"})
        token = f"tok-{uuid.uuid4().hex[:12]}"
        return _json(200, {"access_token": token, "token_type": "bearer", "expires_in": int(self.lifetime)})


def _json(status: int, body: dict[str, object]) -> Reply:
    return Reply(status, {"Content-Type": "application/json"}, body=orjson.dumps(body))

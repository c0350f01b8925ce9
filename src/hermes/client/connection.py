"""Where the APIs are and how the client proves who it is, shared by the sync and the async client."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Any

import httpx

DEFAULT_MANAGEMENT_URL = "http://127.0.0.1:8090"
DEFAULT_FRONTEND_URL = "http://127.0.0.1:8080"
# The environment the CLI (and a client made with ``Connection.from_env``) reads
ENV_MANAGEMENT_URL = "HERMES_MANAGEMENT_URL"
ENV_FRONTEND_URL = "HERMES_FRONTEND_URL"
ENV_USER = "HERMES_USER"
ENV_PASSWORD = "HERMES_PASSWORD"
ENV_TOKEN = "HERMES_TOKEN"


@dataclass(frozen=True)
class Connection:
    """``user``/``password``: HTTP Basic; ``token``: a bearer token (it wins over Basic). ``max_connections``: the
    pool's bound per client (connections are kept open and reused). ``verify``: for https URLs, the CA bundle's
    path or an ``ssl.SSLContext`` (default: the system's, through certifi)."""

    management_url: str = DEFAULT_MANAGEMENT_URL
    frontend_url: str = DEFAULT_FRONTEND_URL
    user: str | None = None
    password: str | None = None
    token: str | None = None
    timeout: float = 30.0
    max_connections: int = 100
    verify: bool | str | ssl.SSLContext = True

    @classmethod
    def from_env(cls) -> Connection:
        env = os.environ
        return cls(
            management_url=env.get(ENV_MANAGEMENT_URL) or DEFAULT_MANAGEMENT_URL,
            frontend_url=env.get(ENV_FRONTEND_URL) or DEFAULT_FRONTEND_URL,
            user=env.get(ENV_USER) or None,
            password=env.get(ENV_PASSWORD) or None,
            token=env.get(ENV_TOKEN) or None,
        )

    def __repr__(self) -> str:  # never the password or the token
        return f"Connection(management_url={self.management_url!r}, frontend_url={self.frontend_url!r})"

    def sync_client(self, base_url: str, transport: httpx.BaseTransport | None = None) -> httpx.Client:
        return httpx.Client(transport=transport, **self._options(base_url))

    def async_client(self, base_url: str, transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=transport, **self._options(base_url))

    def _options(self, base_url: str) -> dict[str, Any]:
        """What the sync and the async client are built with alike."""
        return {
            "base_url": base_url.rstrip("/"),
            "headers": self._headers(),
            "auth": self._auth(),
            "timeout": self.timeout,
            "limits": self._limits(),
            "verify": self._verify(base_url),
        }

    def _verify(self, base_url: str) -> bool | str | ssl.SSLContext:
        # a plain http API never uses TLS: loading the CA bundle for it took 0.2 s of every command's start
        return self.verify if base_url.startswith("https:") else False

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _auth(self) -> httpx.BasicAuth | None:
        return httpx.BasicAuth(self.user, self.password or "") if self.user and not self.token else None

    def _limits(self) -> httpx.Limits:
        return httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections)

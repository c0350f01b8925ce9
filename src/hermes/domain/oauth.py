"""OAuth 2 providers that issue tokens for OAuth-secured subscription endpoints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OAuthProvider:
    name: str
    token_endpoint: str
    client_id: str
    client_secret: str
    token_request_initial_delay: int = 1000  # millis
    token_request_max_delay: int = 30000
    request_timeout: int = 1000
    socket_timeout: int = 0

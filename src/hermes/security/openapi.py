"""How the management and publishing APIs' OpenAPI documents describe signing in: one set of credentials for both."""

from __future__ import annotations

from typing import Any

SECURITY_SCHEMES: dict[str, Any] = {
    "basicAuth": {"type": "http", "scheme": "basic", "description": "a user of the users file (hermes users)"},
    "bearerAuth": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "a token of --auth-jwt-issuer, its subject looked up in the users file",
    },
}
SIGNED_IN: list[dict[str, list[str]]] = [{"basicAuth": []}, {"bearerAuth": []}]

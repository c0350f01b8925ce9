"""Signed deliveries (beyond Hermes), as Standard Webhooks (www.standardwebhooks.com) defines them: each request
carries ``webhook-id``, ``webhook-timestamp`` (Unix seconds) and ``webhook-signature``, a space-separated list of
``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``, one per secret the subscription holds (two while a secret is
being rotated). A secret is ``whsec_`` and the base64 of 16 to 48 random bytes; the broker generates one of 32."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets as random_source
from collections.abc import Iterable, Sequence

from hermes.errors import ValidationError

# Padded base64 of 16-48 bytes after the prefix; the OpenAPI document states the same pattern.
SECRET_PATTERN = r"^whsec_(?:[A-Za-z0-9+/]{4}){5,15}(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)$"
_SECRET = re.compile(SECRET_PATTERN)
MAX_SECRETS = 2  # the current one and, while rotating, the previous one

WEBHOOK_ID = "webhook-id"
WEBHOOK_TIMESTAMP = "webhook-timestamp"
WEBHOOK_SIGNATURE = "webhook-signature"


def check_secrets(value: object, field: str) -> tuple[str, ...]:
    """The secrets of a request body; the message names the field, never the value."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_SECRETS:
        raise ValidationError(f"must be a list of at most {MAX_SECRETS} secrets", field)
    for secret in value:
        if not isinstance(secret, str) or not _SECRET.match(secret):
            raise ValidationError("each must be whsec_ and the base64 of 16 to 48 random bytes", field)
    return tuple(value)


def generate_secret() -> str:
    return "whsec_" + base64.b64encode(random_source.token_bytes(32)).decode()


def signing_now(secrets: Sequence[str], previous_expires_at: int, now_ms: int) -> Sequence[str]:
    """The secrets that sign at ``now_ms``: the previous one (second) only until it expires (0: no expiry)."""
    if previous_expires_at and now_ms >= previous_expires_at:
        return secrets[:1]
    return secrets


def signature_headers(
    secrets: Sequence[str], webhook_id: str, body: bytes | Iterable[bytes], timestamp: int
) -> dict[str, str]:
    """``body``: the bytes, or their chunks (a body streamed from a file), signed as they come."""
    macs = [
        hmac.new(base64.b64decode(secret[6:]), f"{webhook_id}.{timestamp}.".encode(), hashlib.sha256)
        for secret in secrets
    ]
    for chunk in (body,) if isinstance(body, bytes) else body:
        for mac in macs:
            mac.update(chunk)
    signatures = " ".join("v1," + base64.b64encode(mac.digest()).decode() for mac in macs)
    return {WEBHOOK_ID: webhook_id, WEBHOOK_TIMESTAMP: str(timestamp), WEBHOOK_SIGNATURE: signatures}

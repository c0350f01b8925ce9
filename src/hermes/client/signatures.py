"""Verifying a signed delivery as Standard Webhooks (www.standardwebhooks.com) defines it, without the broker's
code: ``webhook-signature`` holds ``v1,<base64 HMAC-SHA256 of "id.timestamp.body">`` per secret that signed it
(two while a secret is rotated); any one matching a secret the subscriber holds is enough."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence

from hermes.errors import InvalidSignature

WEBHOOK_ID = "webhook-id"
WEBHOOK_TIMESTAMP = "webhook-timestamp"
WEBHOOK_SIGNATURE = "webhook-signature"
# Standard Webhooks' tolerance: a recorded request replayed later than this is refused
TOLERANCE_S = 300


def verify(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    now: float | None = None,
    tolerance: int = TOLERANCE_S,
) -> None:
    """Raises ``InvalidSignature`` unless ``body`` and ``headers`` carry a signature of one of ``secrets`` (each
    ``whsec_`` and base64) made within ``tolerance`` seconds of ``now``. ``headers``: matched without case."""
    lower = {key.lower(): value for key, value in headers.items()}
    webhook_id, stamp, signatures = (lower.get(name, "") for name in (WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE))
    if not (webhook_id and stamp and signatures):
        raise InvalidSignature(f"missing {WEBHOOK_ID}, {WEBHOOK_TIMESTAMP} or {WEBHOOK_SIGNATURE}")
    if not stamp.isdigit() or abs((time.time() if now is None else now) - int(stamp)) > tolerance:
        raise InvalidSignature(f"{WEBHOOK_TIMESTAMP}: not within {tolerance} s of now")
    signed = f"{webhook_id}.{stamp}.".encode() + body
    offered = {part.removeprefix("v1,") for part in signatures.split() if part.startswith("v1,")}
    for secret in secrets:
        expected = base64.b64encode(hmac.digest(_key(secret), signed, hashlib.sha256)).decode()
        if any(hmac.compare_digest(expected, candidate) for candidate in offered):
            return
    raise InvalidSignature(f"{WEBHOOK_SIGNATURE}: no signature of a known secret")


def _key(secret: str) -> bytes:
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except binascii.Error:
        raise ValueError("a signing secret is whsec_ and base64") from None

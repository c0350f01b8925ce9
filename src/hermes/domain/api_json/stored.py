"""Stored topics and subscriptions that fail today's validation (``hermes.metadata.stored``), as the management API
shows them: as stored, secrets masked, with our extension field ``invalid`` naming what a PUT must correct."""

from __future__ import annotations

from hermes.domain.api_json.fields import SECRET_MASK, Json
from hermes.domain.endpoint import masked_endpoint
from hermes.errors import StoredEntityInvalid


def stored_topic_to_json(invalid: StoredEntityInvalid) -> Json:
    return {**invalid.stored, "invalid": _problem(invalid)}


def stored_subscription_to_json(invalid: StoredEntityInvalid) -> Json:
    out: Json = dict(invalid.stored)
    if isinstance(endpoint := out.get("endpoint"), str):
        out["endpoint"] = masked_endpoint(endpoint)
    oauth = out.get("oAuthPolicy")
    if isinstance(oauth, dict) and "password" in oauth:
        out["oAuthPolicy"] = {**oauth, "password": SECRET_MASK}
    elif oauth is not None and not isinstance(oauth, dict):
        out["oAuthPolicy"] = SECRET_MASK
    secrets = out.get("signingSecrets")
    if secrets is not None:
        out["signingSecrets"] = [SECRET_MASK] * len(secrets) if isinstance(secrets, list) else SECRET_MASK
    out["invalid"] = _problem(invalid)
    return out


def _problem(invalid: StoredEntityInvalid) -> Json:
    return {"field": invalid.field, "message": invalid.reason}

"""The OpenAPI 3.1 document of the publishing API, served by the frontend at ``/openapi.json``: publishing and
the status routes (the offload service's routes, when the frontend serves them, are documented in
docs/large-messages.md)."""

from __future__ import annotations

from typing import Any

import orjson

from hermes.domain.message import MESSAGE_ID_HEADER
from hermes.domain.names import TOPIC_NAME_PATTERN
from hermes.security.openapi import SECURITY_SCHEMES, SIGNED_IN

_ERROR = {
    "description": "Error",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"message": {"type": "string"}, "code": {"type": "string"}},
                "required": ["message", "code"],
            }
        }
    },
}
_MESSAGE_ID = {
    MESSAGE_ID_HEADER: {"description": "The message's id", "schema": {"type": "string"}},
    "Idempotent-Replayed": {
        "description": "true: a repeat of an Idempotency-Key, answered as its first publish; nothing was stored now",
        "schema": {"type": "string", "enum": ["true"]},
    },
}


def _text(summary: str, answers: dict[str, str]) -> dict[str, Any]:
    responses = {
        status: {"description": text, "content": {"text/plain": {"schema": {"type": "string"}}}}
        for status, text in answers.items()
    }
    return {"get": {"summary": summary, "security": [], "responses": responses}}


_DOWN = "DOWN: what is down (hermes run's embedded broker, docs/broker.md)"
_HEALTH = _text("The process is up", {"200": "UP", "503": _DOWN})
_PUBLISH = {
    "post": {
        "summary": "Publish a message to the topic",
        "description": "With authentication on, --publish-authentication required refuses a publish without "
        "credentials (401); with optional, the topic's auth decides (docs/security.md#publishing). An AVRO topic "
        "also takes avro/binary (docs/publishing.md); a CloudEvents topic takes CloudEvents only: binary mode (ce-* "
        "headers), application/cloudevents+json or application/cloudevents-batch+json (docs/cloudevents.md).",
        "parameters": [
            {
                "name": "topic",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": TOPIC_NAME_PATTERN, "description": "group.topic"},
            },
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": "Our extension: a repeat with this key on this topic, within the topic's "
                "idempotencyWindow, is answered as the first publish and stores nothing; with another body it is "
                "422 (docs/publishing.md#idempotent-publishing)",
                "schema": {"type": "string", "pattern": "^[ -~]{1,255}$"},
            },
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {}}},
        },
        "security": [*SIGNED_IN, {}],
        "responses": {
            "201": {"description": "Acknowledged by Kafka", "headers": _MESSAGE_ID},
            "202": {"description": "Accepted, not acknowledged yet (journaled)", "headers": _MESSAGE_ID},
            **{status: _ERROR for status in ("400", "401", "403", "404", "413", "415", "422", "429", "503")},
        },
    }
}
_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Hermes publishing API", "version": "1.0", "description": "Hermes-compatible publishing."},
    "paths": {
        "/topics/{topic}": _PUBLISH,
        "/": _HEALTH,
        "/status/ping": _HEALTH,
        "/status/health": _HEALTH,
        "/status/ready": _text(
            "Whether the frontend takes publishes", {"200": "READY", "503": "NOT_READY, or NOT_READY: what is down"}
        ),
        "/status/prometheus": {
            "get": {
                "summary": "Prometheus metrics",
                "description": "With authentication on, for authenticated callers only (docs/security.md#metrics).",
                "security": [*SIGNED_IN, {}],
                "responses": {**_text("", {"200": "the exposition"})["get"]["responses"], "401": _ERROR, "429": _ERROR},
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "security": [],
                "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {}}}}},
            }
        },
    },
    "components": {"securitySchemes": SECURITY_SCHEMES},
}
DOCUMENT_JSON = orjson.dumps(_DOCUMENT)


def document() -> dict[str, Any]:
    return orjson.loads(DOCUMENT_JSON)  # type: ignore[no-any-return]

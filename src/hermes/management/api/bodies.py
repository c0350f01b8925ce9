"""Request bodies: JSON objects whose unknown fields are accepted, as Hermes accepts them, but named.

A misspelt field (``"subscriptionPolicy": {"rat": 5}``) would otherwise be dropped without a trace; the
answer names every ignored field in ``Hermes-Ignored-Fields`` (comma-separated JSON paths, percent-encoded
beyond letters, digits and ``_.-~[]$``) and the
management log records them at INFO.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from aiohttp import web

from hermes.errors import FormattingError, ValidationError
from hermes.http.server import read_json
from hermes.management.openapi.components import SCHEMAS
from hermes.management.openapi.schemas import Schema, ref

log = logging.getLogger(__name__)

IGNORED_FIELDS_HEADER = "Hermes-Ignored-Fields"


async def read_object(request: web.Request) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise FormattingError("the body must be a JSON object")
    return body


def flag(request: web.Request, name: str, default: bool = False) -> bool:
    """A boolean query parameter: ``true`` or ``false`` (any case); anything else is a 400 naming it."""
    value = request.query.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise ValidationError("must be true or false", name)
    return value.lower() == "true"


def ignored_fields(value: Any, schema: Schema, path: str = "") -> list[str]:
    """The JSON paths in ``value`` that ``schema`` (one of ``SCHEMAS``, ``$ref`` resolved) has no place for."""
    while "$ref" in schema:
        schema = SCHEMAS[schema["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in schema:  # a field any alternative knows is not ignored
        known = {k: v for alt in schema["anyOf"] for k, v in alt.get("properties", {}).items()}
        schema = {"type": "object", "properties": known}
    if isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        out = []
        for key, item in value.items():
            at = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                out += ignored_fields(item, properties[key], at)
            elif isinstance(extra, dict):
                out += ignored_fields(item, extra, at)
            elif properties is not None and extra is not True:
                out.append(at)
        return out
    if isinstance(value, list) and "items" in schema:
        return [p for i, item in enumerate(value) for p in ignored_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def ignored_fields_header(request: web.Request, body: Any, schema: str | Schema) -> dict[str, str]:
    """The response header naming what ``body`` had that ``schema`` lacks (none when nothing was ignored)."""
    ignored = ignored_fields(body, ref(schema) if isinstance(schema, str) else schema)
    if not ignored:
        return {}
    log.info("%s %s: ignored unknown fields %r", request.method, request.path, ignored)
    # Field names are the client's: percent-encoded, no comma or control character reaches the header.
    return {IGNORED_FIELDS_HEADER: ",".join(quote(p, safe="[].$") for p in ignored)}

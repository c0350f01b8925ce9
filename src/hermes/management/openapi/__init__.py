"""The OpenAPI 3.1 document of the management API, served at ``/openapi.json``.

A test checks that every route of the application is described here, and that responses validate against
these schemas; the API names request fields these schemas lack in ``Hermes-Ignored-Fields``.
"""

from __future__ import annotations

import re

from hermes.management.openapi.components import SCHEMAS
from hermes.management.openapi.paths import PATHS
from hermes.management.openapi.schemas import GROUP_NAME, SIMPLE_NAME, STR, TOPIC_NAME, Schema

_PARAMETERS: dict[str, Schema] = {
    "topic": TOPIC_NAME,
    "topicName": TOPIC_NAME,
    "group": GROUP_NAME,
    "subscription": SIMPLE_NAME,
    "provider": SIMPLE_NAME,
    "version": {"type": "integer", "minimum": 0},
    "id": {"type": "integer", "minimum": 0},
    "idx": {"type": "integer", "minimum": 0},
    "partition": {"type": "integer", "minimum": 0},
    "offset": {"type": "integer", "minimum": 0},
}


def _with_parameters(path: str, operations: dict[str, Schema]) -> dict[str, Schema]:
    names = re.findall(r"{(\w+)}", path)
    parameters = [{"name": n, "in": "path", "required": True, "schema": _PARAMETERS.get(n, STR)} for n in names]
    return {method: {**op, "parameters": parameters + op.get("parameters", [])} for method, op in operations.items()}


def document() -> Schema:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Hermes management API",
            "version": "1.0",
            "description": "Groups, topics, subscriptions, OAuth providers and operations; Hermes-compatible.",
        },
        "paths": {path: _with_parameters(path, operations) for path, operations in PATHS.items()},
        "components": {"schemas": SCHEMAS},
    }

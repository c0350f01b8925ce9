"""The OpenAPI 3.1 document of the management API, served at ``/openapi.json``.

A test checks that every route of the application is described here, and that responses validate against
these schemas; the API names request fields these schemas lack in ``Hermes-Ignored-Fields``.
"""

from __future__ import annotations

import re

from hermes.domain.avro import MAX_SCHEMA_VERSION
from hermes.management.access import Rule, rule_of
from hermes.management.openapi.components import SCHEMAS
from hermes.management.openapi.paths import PATHS
from hermes.management.openapi.schemas import GROUP_NAME, SIMPLE_NAME, STR, TOPIC_NAME, Schema, ref
from hermes.security.openapi import SECURITY_SCHEMES, SIGNED_IN

_PARAMETERS: dict[str, Schema] = {
    "topic": TOPIC_NAME,
    "topicName": TOPIC_NAME,
    "group": GROUP_NAME,
    "subscription": SIMPLE_NAME,
    "provider": SIMPLE_NAME,
    "version": {"type": "integer", "minimum": 0, "maximum": MAX_SCHEMA_VERSION},
    "id": {"type": "integer", "minimum": 0, "maximum": MAX_SCHEMA_VERSION},
    "idx": {"type": "integer", "minimum": 0},
    "partition": {"type": "integer", "minimum": 0},
    "offset": {"type": "integer", "minimum": 0},
    "deadLetterId": {"type": "integer", "minimum": 0},
}


_ERROR = {"description": "Error", "content": {"application/json": {"schema": ref("Error")}}}
# Hermes' role names: who may call each operation (docs/security.md's table)
_WHO = "x-hermes-permission"


def _secured(path: str, method: str, op: Schema) -> Schema:
    """The operation with who may call it: public ones need no credentials; the others answer 401 without valid
    ones, 429 to a client that failed too often, and 403 to a caller without the permission."""
    rule = rule_of(method.upper(), path)
    if rule is Rule.PUBLIC:
        return {**op, "security": [], _WHO: rule.value}
    refusals = {"401": _ERROR, "429": _ERROR, **({"403": _ERROR} if rule is not Rule.ANY else {})}
    return {**op, "responses": {**op["responses"], **refusals}, _WHO: rule.value}


def _with_parameters(path: str, operations: dict[str, Schema]) -> dict[str, Schema]:
    names = re.findall(r"{(\w+)}", path)
    parameters = [{"name": n, "in": "path", "required": True, "schema": _PARAMETERS.get(n, STR)} for n in names]
    return {
        method: _secured(path, method, {**op, "parameters": parameters + op.get("parameters", [])})
        for method, op in operations.items()
    }


def document() -> Schema:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Hermes management API",
            "version": "1.0",
            "description": "Groups, topics, subscriptions, OAuth providers and operations; Hermes-compatible.",
        },
        "paths": {path: _with_parameters(path, operations) for path, operations in PATHS.items()},
        "components": {"schemas": SCHEMAS, "securitySchemes": SECURITY_SCHEMES},
        "security": SIGNED_IN,  # while authentication is on (docs/security.md)
    }

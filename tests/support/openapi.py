"""Checking the management API's answers against its OpenAPI document."""

from __future__ import annotations

from typing import Any

import jsonschema

from hermes.management import openapi

OPENAPI = openapi.document()


def conforms_to_openapi(template: str, method: str, response: Any) -> None:
    """The response's status is documented for the operation and its body validates against its schema."""
    documented = OPENAPI["paths"][template][method]["responses"]
    assert str(response.status_code) in documented, (template, method, response.status_code)
    content = documented[str(response.status_code)].get("content")
    if content and response.content:
        schema = {**content["application/json"]["schema"], "components": OPENAPI["components"]}
        jsonschema.validate(response.json(), schema)

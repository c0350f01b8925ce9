"""``POST /filters/{topic}``: Hermes' filter debugger. Verifies subscription filters against a message
(``{"filters": [...], "message": "<base64>"}``) the way consumers apply them, and answers
``{"status": "MATCHED" | "NOT_MATCHED" | "ERROR", "errorMessage"?}``."""

from __future__ import annotations

import base64
import binascii
import time

import orjson
from aiohttp import web

from hermes.domain import api_json
from hermes.domain.avro import json_to_avro
from hermes.domain.filters import MessageFilters
from hermes.domain.message import Message
from hermes.domain.topic import ContentType
from hermes.errors import HermesError, SchemaNotFound, ValidationError
from hermes.http.server import json_response
from hermes.management.api.bodies import ignored_fields_header, read_object
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE

routes = web.RouteTableDef()


@routes.post("/filters/{topic}")
async def verify(request: web.Request) -> web.Response:
    body = await read_object(request)
    filters = MessageFilters(api_json.filters_from_json(body.get("filters")))
    encoded = body.get("message")
    if not isinstance(encoded, str):
        raise ValidationError("must be the message, base64-encoded", "message")
    try:
        content = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError("is not valid base64", "message") from None
    service = request.app[SERVICE]
    topic = await service.topic(topic_name(request))
    headers = ignored_fields_header(request, body, "FiltersVerification")
    if topic.content_type is ContentType.AVRO:  # as Hermes: the message is JSON that the latest schema converts
        latest = await service.schema(topic.name)
        try:
            if latest is None:
                raise SchemaNotFound(f"Topic {topic.qualified_name} has no schema")
            json_to_avro(latest[1], content)
        except HermesError as exc:
            return json_response({"status": "ERROR", "errorMessage": exc.message}, headers=headers)
    message = Message(topic.qualified_name, 0, 0, "", content, int(time.time() * 1000))
    try:
        matched = filters.passes(message, lambda m: orjson.loads(m.body))
    except (ValueError, TypeError) as exc:
        return json_response({"status": "ERROR", "errorMessage": str(exc)}, headers=headers)
    return json_response({"status": "MATCHED" if matched else "NOT_MATCHED"}, headers=headers)

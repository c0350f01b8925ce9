"""``/topics``: create, list (all or per group), get, update, delete."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from hermes.domain import api_json
from hermes.domain.avro import parse_schema, schema_version
from hermes.domain.names import TopicName
from hermes.domain.topic import ContentType, Topic
from hermes.errors import OperationDisabled, StoredEntityInvalid, ValidationError
from hermes.http.server import json_response, read_json
from hermes.management.api.bodies import flag, ignored_fields_header, read_object
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService

routes = web.RouteTableDef()
# Not /topics/query, a POST of queries.py: its other methods are 405, not a topic named "query"
_TOPIC = "/topics/{topic:(?!query$)[^{}/]+}"


def topic_name(request: web.Request) -> TopicName:
    return TopicName.parse(request.match_info["topic"], "topicName")


@routes.get("/topics")
async def list_topics(request: web.Request) -> web.Response:
    """Also those stored that fail validation, but with ``tracked``: nobody publishes to them."""
    topics = await request.app[SERVICE].stored_topics(request.query.get("groupName") or None)
    if flag(request, "tracked"):
        return json_response([t.qualified_name for t in topics if isinstance(t, Topic) and t.tracking_enabled])
    return json_response([t.qualified_name if isinstance(t, Topic) else t.name for t in topics])


async def topic_with_schema(service: ManagementService, topic: Topic) -> dict[str, Any]:
    """Hermes' ``TopicWithSchema``: the topic, and the latest schema (a string) of an AVRO topic that has one."""
    body = api_json.topic_to_json(topic)
    if topic.content_type is ContentType.AVRO and (latest := await service.schema(topic.name)) is not None:
        body["schema"] = latest[1]
    return body


def _schema_text(value: Any, field: str = "schema") -> str:
    """A schema given as a JSON object or as a string holding one; validated as Avro."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    parse_schema(text)
    return text


@routes.post("/topics")
async def create_topic(request: web.Request) -> web.Response:
    body = await read_object(request)
    topic = api_json.topic_from_json(body)
    api_json.check_owner_named(body, created=True)  # once every field's own check passed
    schema = body.get("schema")
    if schema is not None and topic.content_type is not ContentType.AVRO:
        raise ValidationError("is only for AVRO topics", "schema")
    text = _schema_text(schema) if schema is not None else None
    service = request.app[SERVICE]
    created = await service.create_topic(topic)
    if text is not None:
        await service.save_schema(created.name, text)
    shown = await topic_with_schema(service, created)
    return json_response(shown, status=201, headers=ignored_fields_header(request, body, "Topic"))


@routes.get("/topics/{topic}/schema")
@routes.get("/topics/{topic}/schema/versions/{version}")
@routes.get("/topics/{topic}/schema/ids/{id}")
async def get_schema(request: web.Request) -> web.Response:
    """A schema version (a schema's id is its version: this registry numbers schemas per topic); like
    Hermes, 204 without a body when there is none."""
    field = "id" if "id" in request.match_info else "version"
    version_text = request.match_info.get(field)
    version = schema_version(version_text, field) if version_text is not None else None
    service = request.app[SERVICE]
    name = topic_name(request)
    await service.topic(name)
    found = await service.schema(name, version)
    if found is None:
        return web.Response(status=204)
    version, schema = found
    return web.Response(body=schema.encode(), content_type="application/json", headers={"Schema-Version": str(version)})


@routes.delete("/topics/{topic}/schema")
async def delete_schema(request: web.Request) -> web.Response:
    """Hermes refuses by default (``schema.removeSchema``): an AVRO topic without a schema cannot publish."""
    await request.app[SERVICE].topic(topic_name(request))
    raise OperationDisabled("Removing schema is disabled.")


@routes.get("/topics/{topic}/schema/versions")
async def list_schema_versions(request: web.Request) -> web.Response:
    return json_response(await request.app[SERVICE].schema_versions(topic_name(request)))


@routes.post("/topics/{topic}/schema")
async def save_schema(request: web.Request) -> web.Response:
    name = topic_name(request)
    service = request.app[SERVICE]
    topic = await service.topic(name)
    if topic.content_type is not ContentType.AVRO:
        raise ValidationError(f"topic {name.qualified} is a JSON topic; schemas are for AVRO topics", "schema")
    version = await service.save_schema(name, _schema_text(await read_json(request)))
    return json_response({"version": version}, status=201)


@routes.get(_TOPIC)
async def get_topic(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    try:
        topic = await service.topic(topic_name(request))
    except StoredEntityInvalid as invalid:  # as stored, for its owner to correct with a PUT
        return json_response(api_json.stored_topic_to_json(invalid))
    return json_response(await topic_with_schema(service, topic))


@routes.put(_TOPIC)
async def update_topic(request: web.Request) -> web.Response:
    """Changes the fields sent; a ``schema`` different from the latest adds a schema version, as in Hermes."""
    patch = await read_object(request)
    api_json.check_owner_named(patch, created=False)
    service = request.app[SERVICE]
    name = topic_name(request)
    schema = patch.pop("schema", None)
    if schema is not None:
        topic = await service.topic(name)
        if topic.content_type is not ContentType.AVRO:
            raise ValidationError("is only for AVRO topics", "schema")
        text = _schema_text(schema)
        latest = await service.schema(name)
        if latest is None or orjson.loads(latest[1]) != orjson.loads(text):
            await service.save_schema(name, text)
    updated = await service.update_topic(name, patch)
    shown = await topic_with_schema(service, updated)
    return json_response(shown, headers=ignored_fields_header(request, patch, "Topic"))


@routes.delete(_TOPIC)
async def delete_topic(request: web.Request) -> web.Response:
    await request.app[SERVICE].delete_topic(topic_name(request))
    return web.Response(status=200)

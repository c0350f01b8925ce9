"""``/topics``: create, list (all or per group), get, update, delete."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from hermes.domain import codec
from hermes.domain.avro import parse_schema
from hermes.domain.names import TopicName
from hermes.domain.topic import ContentType
from hermes.errors import FormattingError, ValidationError
from hermes.http.server import json_response, read_json
from hermes.management.context import SERVICE


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/topics", list_topics)
    router.add_post("/topics", create_topic)
    router.add_get("/topics/{topic}", get_topic)
    router.add_put("/topics/{topic}", update_topic)
    router.add_delete("/topics/{topic}", delete_topic)
    router.add_get("/topics/{topic}/schema", get_schema)
    router.add_get("/topics/{topic}/schema/versions", list_schema_versions)
    router.add_get("/topics/{topic}/schema/versions/{version}", get_schema)
    router.add_post("/topics/{topic}/schema", save_schema)


def topic_name(request: web.Request) -> TopicName:
    return TopicName.parse(request.match_info["topic"], "topicName")


async def list_topics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    topics = await asyncio.to_thread(service.repository.list_topics, request.query.get("groupName"))
    return json_response([t.qualified_name for t in topics])


def _schema_text(value: Any, field: str = "schema") -> str:
    """A schema given as a JSON object or as a string holding one; validated as Avro."""
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    parse_schema(text)
    return text


async def create_topic(request: web.Request) -> web.Response:
    body = await read_json(request)
    topic = codec.topic_from_json(body)
    schema = body.get("schema") if isinstance(body, dict) else None
    if schema is not None and topic.content_type is not ContentType.AVRO:
        raise ValidationError("is only for AVRO topics", "schema")
    text = _schema_text(schema) if schema is not None else None
    service = request.app[SERVICE]
    created = await service.create_topic(topic)
    if text is not None:
        await asyncio.to_thread(service.repository.save_schema, created.name, text)
    return json_response(codec.topic_to_json(created), status=201)


async def get_schema(request: web.Request) -> web.Response:
    version_text = request.match_info.get("version")
    if version_text is not None and not version_text.isdigit():
        raise ValidationError("must be a number", "version")
    repository = request.app[SERVICE].repository
    version, schema = await asyncio.to_thread(
        repository.get_schema, topic_name(request), int(version_text) if version_text else None
    )
    return web.Response(body=schema.encode(), content_type="application/json", headers={"Schema-Version": str(version)})


async def list_schema_versions(request: web.Request) -> web.Response:
    repository = request.app[SERVICE].repository
    return json_response(await asyncio.to_thread(repository.list_schema_versions, topic_name(request)))


async def save_schema(request: web.Request) -> web.Response:
    name = topic_name(request)
    repository = request.app[SERVICE].repository
    topic = await asyncio.to_thread(repository.get_topic, name)
    if topic.content_type is not ContentType.AVRO:
        raise ValidationError(f"topic {name.qualified} is a JSON topic; schemas are for AVRO topics", "schema")
    version = await asyncio.to_thread(repository.save_schema, name, _schema_text(await read_json(request)))
    return json_response({"version": version}, status=201)


async def get_topic(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    topic = await asyncio.to_thread(service.repository.get_topic, topic_name(request))
    return json_response(codec.topic_to_json(topic))


async def update_topic(request: web.Request) -> web.Response:
    patch = await read_json(request)
    if not isinstance(patch, dict):
        raise FormattingError("the body must be a JSON object")
    updated = await request.app[SERVICE].update_topic(topic_name(request), patch)
    return json_response(codec.topic_to_json(updated))


async def delete_topic(request: web.Request) -> web.Response:
    await request.app[SERVICE].delete_topic(topic_name(request))
    return web.Response(status=200)

"""``/topics``: create, list (all or per group), get, update, delete."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hermes.domain import codec
from hermes.domain.names import TopicName
from hermes.errors import FormattingError
from hermes.http.server import json_response, read_json
from hermes.management.context import SERVICE


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/topics", list_topics)
    router.add_post("/topics", create_topic)
    router.add_get("/topics/{topic}", get_topic)
    router.add_put("/topics/{topic}", update_topic)
    router.add_delete("/topics/{topic}", delete_topic)


def topic_name(request: web.Request) -> TopicName:
    return TopicName.parse(request.match_info["topic"], "topicName")


async def list_topics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    topics = await asyncio.to_thread(service.repository.list_topics, request.query.get("groupName"))
    return json_response([t.qualified_name for t in topics])


async def create_topic(request: web.Request) -> web.Response:
    topic = codec.topic_from_json(await read_json(request))
    created = await request.app[SERVICE].create_topic(topic)
    return json_response(codec.topic_to_json(created), status=201)


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

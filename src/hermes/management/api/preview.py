"""Topic preview: ``/topics/{topic}/preview``, ``/preview/{idx}`` (one message's bytes) and
``/preview/cluster/{cluster}/partition/{partition}/offset/{offset}`` (one message by its position)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hermes.domain.topic import Topic
from hermes.errors import NotFoundError, ValidationError
from hermes.http.server import json_response
from hermes.management import preview
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService

routes = web.RouteTableDef()


async def _topic(request: web.Request) -> tuple[ManagementService, Topic]:
    service = request.app[SERVICE]
    return service, await asyncio.to_thread(service.repository.get_topic, topic_name(request))


def _previews(service: ManagementService, topic: Topic) -> list[bytes]:
    return [preview.as_json(service.repository, topic, m) for m in preview.recent_messages(service.admin, topic)]


def _number(request: web.Request, field: str) -> int:
    text = request.match_info[field]
    if not text.isdigit():
        raise ValidationError("must be a whole number", field)
    return int(text)


@routes.get("/topics/{topic}/preview")
async def list_preview(request: web.Request) -> web.Response:
    service, topic = await _topic(request)
    contents = await asyncio.to_thread(_previews, service, topic)
    return json_response([preview.preview(c) for c in contents])


@routes.get("/topics/{topic}/preview/{idx}")
async def raw_preview(request: web.Request) -> web.Response:
    idx = _number(request, "idx")
    service, topic = await _topic(request)
    contents = await asyncio.to_thread(_previews, service, topic)
    if idx >= len(contents):
        raise NotFoundError(f"Message preview not found for topic {topic.qualified_name} and offset {idx}")
    return web.Response(body=contents[idx][: preview.PREVIEW_MAX_BYTES], content_type="application/octet-stream")


@routes.get("/topics/{topic}/preview/cluster/{cluster}/partition/{partition}/offset/{offset}")
async def message_at(request: web.Request) -> web.Response:
    partition, offset = _number(request, "partition"), _number(request, "offset")
    service, topic = await _topic(request)
    cluster = request.match_info["cluster"]
    if cluster != service.settings.cluster_name:
        raise NotFoundError(f"No brokers cluster {cluster}: the one cluster is {service.settings.cluster_name}")
    found = await asyncio.to_thread(preview.message_at, service.admin, topic, partition, offset)
    if found is None:
        raise NotFoundError(
            f"Message not found for brokers cluster {cluster}, topic {topic.qualified_name}, "
            f"partition {partition} and offset {offset}"
        )
    content = await asyncio.to_thread(preview.as_json, service.repository, topic, found)
    return json_response(content.decode("utf-8", "replace"))

"""Topic preview: ``/topics/{topic}/preview``, ``/preview/{idx}`` (one message's bytes) and
``/preview/cluster/{cluster}/partition/{partition}/offset/{offset}`` (one message by its position)."""

from __future__ import annotations

from aiohttp import web

from hermes.domain.topic import Topic
from hermes.errors import NotFoundError, ValidationError
from hermes.http.server import json_response
from hermes.management import preview
from hermes.management.api.datacenters import the_datacenter
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService

routes = web.RouteTableDef()


async def _topic(request: web.Request) -> tuple[ManagementService, Topic]:
    service = request.app[SERVICE]
    return service, await service.topic(topic_name(request))


def _number(request: web.Request, field: str) -> int:
    text = request.match_info[field]
    if not (text.isascii() and text.isdigit()):
        raise ValidationError("must be a whole number", field)
    return int(text)


@routes.get("/topics/{topic}/preview")
async def list_preview(request: web.Request) -> web.Response:
    service, topic = await _topic(request)
    return json_response([preview.preview(c) for c in await service.recent_messages(topic)])


@routes.get("/topics/{topic}/preview/{idx}")
async def raw_preview(request: web.Request) -> web.Response:
    idx = _number(request, "idx")
    service, topic = await _topic(request)
    contents = await service.recent_messages(topic)
    if idx >= len(contents):
        raise NotFoundError(f"Message preview not found for topic {topic.qualified_name} and offset {idx}")
    return web.Response(body=contents[idx][: preview.PREVIEW_MAX_BYTES], content_type="application/octet-stream")


@routes.get("/topics/{topic}/preview/cluster/{cluster}/partition/{partition}/offset/{offset}")
async def message_at(request: web.Request) -> web.Response:
    partition, offset = _number(request, "partition"), _number(request, "offset")
    service, topic = await _topic(request)
    cluster = the_datacenter(service, request.match_info["cluster"], "brokers cluster")
    content = await service.message_at(topic, partition, offset)
    if content is None:
        raise NotFoundError(
            f"Message not found for brokers cluster {cluster}, topic {topic.qualified_name}, "
            f"partition {partition} and offset {offset}"
        )
    return json_response(content.decode("utf-8", "replace"))

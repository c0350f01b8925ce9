"""``/consistency/*``: Hermes compares the metadata of its datacenters with one another and with Kafka.
There is one datacenter here, so groups, topics and subscriptions are never inconsistent between datacenters
and a sync has nothing to do; between the metadata store and Kafka, Kafka topics that no Hermes topic
accounts for are listed, and can be removed."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hermes.domain.names import TopicName, validate_simple_name
from hermes.domain.trace import TRACKING_TOPIC
from hermes.errors import TopicNotFound, ValidationError
from hermes.http.server import json_response
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService

routes = web.RouteTableDef()


def _is_internal(name: str) -> bool:
    """Kafka's own topics (``__consumer_offsets``) and Hermes' (message tracking)."""
    return name.startswith("_") or name == TRACKING_TOPIC


def _unknown_to_hermes(service: ManagementService) -> list[str]:
    known = {t.qualified_name for t in service.repository.list_topics()}
    return sorted(n for n in service.admin.topic_names() if n not in known and not _is_internal(n))


@routes.get("/consistency/groups")
async def list_groups(request: web.Request) -> web.Response:
    groups = await asyncio.to_thread(request.app[SERVICE].repository.list_groups)
    return json_response(sorted(g.name for g in groups))


@routes.get("/consistency/inconsistencies/groups")
async def inconsistent_groups(_: web.Request) -> web.Response:
    return json_response([])


@routes.post("/consistency/sync/groups/{group}")
async def sync_group(request: web.Request) -> web.Response:
    await asyncio.to_thread(request.app[SERVICE].repository.get_group, request.match_info["group"])
    return web.Response(status=200)


@routes.post("/consistency/sync/topics/{topic}")
async def sync_topic(request: web.Request) -> web.Response:
    await asyncio.to_thread(request.app[SERVICE].repository.get_topic, topic_name(request))
    return web.Response(status=200)


@routes.post("/consistency/sync/topics/{topic}/subscriptions/{subscription}")
async def sync_subscription(request: web.Request) -> web.Response:
    name = validate_simple_name(request.match_info["subscription"], "subscriptionName")
    await asyncio.to_thread(request.app[SERVICE].repository.get_subscription, topic_name(request), name)
    return web.Response(status=200)


@routes.get("/consistency/inconsistencies/topics")
async def inconsistent_topics(request: web.Request) -> web.Response:
    return json_response(await asyncio.to_thread(_unknown_to_hermes, request.app[SERVICE]))


@routes.delete("/consistency/inconsistencies/topics")
async def remove_inconsistent_topic(request: web.Request) -> web.Response:
    """Deletes a Kafka topic that no Hermes topic accounts for (``?topicName=``); a Hermes topic's Kafka
    topic is deleted with the Hermes topic, never here."""
    service = request.app[SERVICE]
    name = request.query.get("topicName", "")
    if name not in await asyncio.to_thread(_unknown_to_hermes, service):
        try:
            await asyncio.to_thread(service.repository.get_topic, TopicName.parse(name, "topicName"))
        except (TopicNotFound, ValidationError):
            raise TopicNotFound(f"No Kafka topic {name!r} outside Hermes' topics") from None
        raise ValidationError(f"{name} is a Hermes topic: delete it with DELETE /topics/{name}", "topicName")
    await asyncio.to_thread(service.admin.delete_topic, name)
    return web.Response(status=200)

"""Hermes' queries and search: ``/query/{groups,topics,subscriptions}``, ``/topics/query``,
``/topics/{t}/subscriptions/query``, ``/search/query`` and ``/stats``. Queries run over the JSON the API
answers with (secrets masked), so a query can name any field a client can read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from hermes.domain import api_json
from hermes.domain.topic import Ack, ContentType
from hermes.http.server import json_response, read_json
from hermes.management import query
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService

routes = web.RouteTableDef()

Json = dict[str, Any]


async def selected(request: web.Request, collect: Callable[[ManagementService], Awaitable[list[Json]]]) -> list[Json]:
    """What ``collect`` finds that the request's query matches; an invalid query is a 400 before any look-up."""
    document = await read_json(request)
    query.parse(document)
    return query.select(document, await collect(request.app[SERVICE]))


async def _groups(service: ManagementService) -> list[Json]:
    return [{"groupName": g.name} for g in await service.groups()]


async def _topics(service: ManagementService) -> list[Json]:
    return [api_json.topic_to_json(t) for t in await service.topics()]


async def _subscriptions(service: ManagementService) -> list[Json]:
    return [api_json.subscription_to_json(s) for s in await service.subscriptions()]


@routes.post("/query/groups")
async def query_groups(request: web.Request) -> web.Response:
    return json_response(await selected(request, _groups))


@routes.post("/query/topics")
async def query_topics(request: web.Request) -> web.Response:
    return json_response(await selected(request, _topics))


@routes.post("/query/subscriptions")
async def query_subscriptions(request: web.Request) -> web.Response:
    return json_response(await selected(request, _subscriptions))


@routes.post("/topics/query")
async def query_topic_names(request: web.Request) -> web.Response:
    group = request.query.get("groupName") or None

    async def of_group(service: ManagementService) -> list[Json]:
        return [api_json.topic_to_json(t) for t in await service.topics(group)]

    return json_response([t["name"] for t in await selected(request, of_group)])


@routes.post("/topics/{topic}/subscriptions/query")
async def query_subscription_names(request: web.Request) -> web.Response:
    topic = topic_name(request)

    async def of_topic(service: ManagementService) -> list[Json]:
        return [api_json.subscription_to_json(s) for s in await service.subscriptions(topic)]

    return json_response([s["name"] for s in await selected(request, of_topic)])


@routes.get("/search/query")
async def search(request: web.Request) -> web.Response:
    """Topics and subscriptions whose name or owner id (and endpoint, for subscriptions) contains ``q``,
    ignoring case; no ``q`` finds nothing."""
    text = request.query.get("q", "").strip().lower()
    service = request.app[SERVICE]
    results: list[Json] = []
    if text:
        for topic in await service.topics():
            if text in topic.qualified_name.lower() or text in topic.owner.id.lower():
                results.append(
                    {
                        "type": "TOPIC",
                        "name": topic.qualified_name,
                        "topic": {"groupName": topic.name.group, "owner": {"id": topic.owner.id}},
                    }
                )
        for sub in await service.subscriptions():
            endpoint = sub.endpoint.masked
            if any(text in field.lower() for field in (sub.name, sub.owner.id, endpoint)):
                name = sub.topic_name
                topic_item = {"name": name.name, "qualifiedName": name.qualified, "groupName": name.group}
                results.append(
                    {
                        "type": "SUBSCRIPTION",
                        "name": sub.name,
                        "subscription": {"endpoint": endpoint, "topic": topic_item},
                    }
                )
    return json_response({"results": results, "totalCount": len(results)})


@routes.get("/stats")
async def stats(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    topics = await service.topics()
    subs = await service.subscriptions()
    return json_response(
        {
            "topicStats": {
                "topicCount": len(topics),
                "ackAllTopicCount": sum(t.ack is Ack.ALL for t in topics),
                "trackingEnabledTopicCount": sum(t.tracking_enabled for t in topics),
                "avroTopicCount": sum(t.content_type is ContentType.AVRO for t in topics),
            },
            "subscriptionStats": {
                "subscriptionCount": len(subs),
                "trackingEnabledSubscriptionCount": sum(s.tracking_enabled for s in subs),
                "avroSubscriptionCount": sum(s.content_type is ContentType.AVRO for s in subs),
            },
        }
    )

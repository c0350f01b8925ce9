"""Hermes' queries and search: ``/query/{groups,topics,subscriptions}``, ``/topics/query``,
``/topics/{t}/subscriptions/query``, ``/search/query`` and ``/stats``. Queries run over the JSON the API
answers with (secrets masked), so a query can name any field a client can read."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from hermes.domain import api_json
from hermes.domain.topic import Ack, ContentType
from hermes.http.server import json_response, read_json
from hermes.management import query
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.metadata.repository import MetadataRepository

routes = web.RouteTableDef()

Json = dict[str, Any]


def _topics(repository: MetadataRepository, group: str | None = None) -> list[Json]:
    return [api_json.topic_to_json(t) for t in repository.list_topics(group)]


def _subscriptions(repository: MetadataRepository) -> list[Json]:
    return [api_json.subscription_to_json(s) for s in repository.list_subscriptions()]


async def _selected(request: web.Request, items: Any, *args: Any) -> list[Json]:
    document = await read_json(request)
    query.parse(document)  # an invalid query is a 400 before any look-up
    found = await asyncio.to_thread(items, request.app[SERVICE].repository, *args)
    return query.select(document, found)


@routes.post("/query/groups")
async def query_groups(request: web.Request) -> web.Response:
    def groups(repository: MetadataRepository) -> list[Json]:
        return [{"groupName": g.name} for g in repository.list_groups()]

    return json_response(await _selected(request, groups))


@routes.post("/query/topics")
async def query_topics(request: web.Request) -> web.Response:
    return json_response(await _selected(request, _topics))


@routes.post("/query/subscriptions")
async def query_subscriptions(request: web.Request) -> web.Response:
    return json_response(await _selected(request, _subscriptions))


@routes.post("/topics/query")
async def query_topic_names(request: web.Request) -> web.Response:
    found = await _selected(request, _topics, request.query.get("groupName") or None)
    return json_response([t["name"] for t in found])


@routes.post("/topics/{topic}/subscriptions/query")
async def query_subscription_names(request: web.Request) -> web.Response:
    topic = topic_name(request)

    def of_topic(repository: MetadataRepository) -> list[Json]:
        repository.get_topic(topic)
        return [api_json.subscription_to_json(s) for s in repository.list_subscriptions(topic)]

    return json_response([s["name"] for s in await _selected(request, of_topic)])


@routes.get("/search/query")
async def search(request: web.Request) -> web.Response:
    """Topics and subscriptions whose name or owner id (and endpoint, for subscriptions) contains ``q``,
    ignoring case; no ``q`` finds nothing."""
    text = request.query.get("q", "").strip().lower()
    repository = request.app[SERVICE].repository

    def find() -> list[Json]:
        if not text:
            return []
        results: list[Json] = []
        for topic in repository.list_topics():
            if text in topic.qualified_name.lower() or text in topic.owner.id.lower():
                results.append(
                    {
                        "type": "TOPIC",
                        "name": topic.qualified_name,
                        "topic": {"groupName": topic.name.group, "owner": {"id": topic.owner.id}},
                    }
                )
        for sub in repository.list_subscriptions():
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
        return results

    results = await asyncio.to_thread(find)
    return json_response({"results": results, "totalCount": len(results)})


@routes.get("/stats")
async def stats(request: web.Request) -> web.Response:
    repository = request.app[SERVICE].repository

    def count() -> Json:
        topics = repository.list_topics()
        subs = repository.list_subscriptions()
        return {
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

    return json_response(await asyncio.to_thread(count))

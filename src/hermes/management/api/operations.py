"""Operations: subscription and topic metrics, health, last undelivered message, retransmission."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

from hermes.consumers.metrics import UNDELIVERED_NAMESPACE
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription
from hermes.errors import NotFoundError
from hermes.frontend.metrics import TOPIC_METRICS_NAMESPACE
from hermes.http.server import json_response
from hermes.management import operations
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService


def register(router: web.UrlDispatcher) -> None:
    base = "/topics/{topic}/subscriptions/{subscription}"
    router.add_get(base + "/metrics", subscription_metrics)
    router.add_get(base + "/health", subscription_health)
    router.add_get(base + "/undelivered/last", last_undelivered)
    router.add_put(base + "/retransmission", retransmit)
    router.add_post(base + "/retransmission", retransmit)
    router.add_get("/topics/{topic}/metrics", topic_metrics)
    router.add_get("/unhealthy", unhealthy)


async def _subscription(request: web.Request) -> tuple[ManagementService, Subscription]:
    service = request.app[SERVICE]
    sub = await asyncio.to_thread(
        service.repository.get_subscription, topic_name(request), request.match_info["subscription"]
    )
    return service, sub


def _metrics(service: ManagementService, sub: Subscription) -> dict[str, Any]:
    return operations.subscription_metrics(service.repository, service.admin, sub)


async def subscription_metrics(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    return json_response(await asyncio.to_thread(_metrics, service, sub))


async def subscription_health(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    metrics = await asyncio.to_thread(_metrics, service, sub)
    return json_response(operations.subscription_health(metrics))


async def last_undelivered(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    record = await asyncio.to_thread(
        service.repository.get_document, UNDELIVERED_NAMESPACE, sub.qualified_name.qualified
    )
    if record is None:
        raise NotFoundError(f"No undelivered message for subscription {sub.qualified_name.qualified}")
    return json_response(record)


async def retransmit(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    raw = await request.read()
    try:
        body: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = raw  # the older POST form sends the bare date or "-6h"
    moment = operations.parse_retransmission_date(body)
    summary = await asyncio.to_thread(
        operations.retransmit, service.repository, service.admin, sub, moment, service.settings.cluster_name
    )
    return json_response(summary)


async def topic_metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    name: TopicName = topic_name(request)

    def collect() -> dict[str, Any]:
        service.repository.get_topic(name)
        end = service.admin.end_offsets(name.qualified)
        begin = service.admin.beginning_offsets(name.qualified)
        subs = service.repository.list_subscriptions(name)
        per_sub = [_metrics(service, s) for s in subs]
        now = time.time() * 1000
        frontends = [
            v
            for k, v in service.repository.list_documents(TOPIC_METRICS_NAMESPACE).items()
            if k.startswith(f"{name.qualified}/") and now - v.get("updatedAt", 0) <= 30_000
        ]
        return {
            "published": sum(end.values()) - sum(begin.values()),
            "rate": round(sum(float(f.get("publishedPerSecond", 0)) for f in frontends), 3),
            "subscriptions": len(subs),
            "delivered": sum(m["delivered"] for m in per_sub),
            "discarded": sum(m["discarded"] for m in per_sub),
            "deliveryRate": round(sum(m["codes2xx"] for m in per_sub), 3),
        }

    return json_response(await asyncio.to_thread(collect))


async def unhealthy(request: web.Request) -> web.Response:
    service = request.app[SERVICE]

    def collect() -> list[dict[str, Any]]:
        out = []
        for sub in service.repository.list_subscriptions():
            health = operations.subscription_health(_metrics(service, sub))
            if health["problems"]:
                out.append(
                    {"name": sub.name, "qualifiedTopicName": sub.topic_name.qualified, "problems": health["problems"]}
                )
        return out

    return json_response(await asyncio.to_thread(collect))

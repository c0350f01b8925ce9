"""Operations: subscription and topic metrics, health, consumer groups, last undelivered message,
retransmission, ``/unhealthy``, and the metrics queries."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from hermes.domain.subscription import Severity, Subscription
from hermes.domain.topic import Owner
from hermes.errors import NotFoundError
from hermes.http.server import json_response
from hermes.management import monitoring, retransmission
from hermes.management.api.bodies import flag
from hermes.management.api.owners import PLAINTEXT
from hermes.management.api.queries import selected
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService
from hermes.metadata.documents import UNDELIVERED_LAST

routes = web.RouteTableDef()

Json = dict[str, Any]


async def _subscription(request: web.Request) -> tuple[ManagementService, Subscription]:
    service = request.app[SERVICE]
    return service, await service.subscription(topic_name(request), request.match_info["subscription"])


@routes.get("/topics/{topic}/subscriptions/{subscription}/metrics")
async def subscription_metrics(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    return json_response(monitoring.hermes_subscription_metrics(await service.subscription_metrics(sub), sub))


@routes.get("/topics/{topic}/subscriptions/{subscription}/metrics/persistent")
async def persistent_metrics(request: web.Request) -> web.Response:
    """Hermes' lifetime counts (they survive restarts here too: consumers store them with their snapshots)."""
    service, sub = await _subscription(request)
    metrics = await service.subscription_metrics(sub)
    return json_response({"delivered": metrics["delivered"], "discarded": metrics["discarded"], "volume": 0})


@routes.get("/topics/{topic}/subscriptions/{subscription}/health")
async def subscription_health(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    return json_response(monitoring.subscription_health(await service.subscription_metrics(sub)))


@routes.get("/topics/{topic}/subscriptions/{subscription}/circuit-breaker")
async def circuit_breaker(request: web.Request) -> web.Response:
    """Our extension: each consumer node's circuit breaker of the subscription."""
    service, sub = await _subscription(request)
    return json_response(monitoring.circuit_breaker(await service.subscription_metrics(sub), sub))


@routes.get("/topics/{topic}/subscriptions/{subscription}/consumer-groups")
async def consumer_groups(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    return json_response(await service.consumer_groups(sub))


@routes.get("/topics/{topic}/subscriptions/{subscription}/undelivered/last")
async def last_undelivered(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    record = await service.document(UNDELIVERED_LAST, sub.qualified_name.qualified)
    if record is None:
        raise NotFoundError(f"No undelivered message for subscription {sub.qualified_name.qualified}")
    return json_response(record)


@routes.put("/topics/{topic}/subscriptions/{subscription}/retransmission")
@routes.post("/topics/{topic}/subscriptions/{subscription}/retransmission")
async def retransmit(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    raw = await request.read()
    try:
        body: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = raw  # the older POST form sends the bare date or "-6h"
    moment = retransmission.parse_retransmission_date(body)
    return json_response(await service.retransmit(sub, moment, flag(request, "dryRun")))


@routes.get("/topics/{topic}/metrics")
async def topic_metrics(request: web.Request) -> web.Response:
    return json_response(await request.app[SERVICE].topic_metrics(topic_name(request)))


@routes.get("/unhealthy")
@routes.get("/unhealthy/")
async def unhealthy(request: web.Request) -> web.Response:
    """Hermes' ``/unhealthy``: by default only subscriptions whose ``monitoringDetails.severity`` matters
    (``respectMonitoringSeverity=false`` lists all, also those of the default severity, NON_IMPORTANT),
    optionally of one owner, some subscription names or topics; ``Accept: text/plain`` answers one
    ``name - problems`` line each."""
    service = request.app[SERVICE]
    params = request.query
    respect = flag(request, "respectMonitoringSeverity", default=True)
    names = set(params.getall("subscriptionNames", []))
    topics = set(params.getall("qualifiedTopicNames", []))
    owner: Owner | None = None
    if params.get("ownerSourceName") == PLAINTEXT:  # as Hermes: no or an unknown source does not narrow it down
        owner = Owner(PLAINTEXT, params.get("ownerId", ""))

    def wanted(sub: Subscription) -> bool:
        return not (
            (respect and sub.monitoring_details.severity is Severity.NON_IMPORTANT)
            or (names and sub.name not in names)
            or (topics and sub.topic_name.qualified not in topics)
            or (owner is not None and sub.owner != owner)
        )

    found = []
    for sub in filter(wanted, await service.subscriptions()):
        health = monitoring.subscription_health(await service.subscription_metrics(sub))
        if health["problems"]:
            severity = sub.monitoring_details.severity.value
            found.append(
                {
                    "name": sub.name,
                    "topicName": sub.topic_name.qualified,
                    "severity": severity,
                    "problems": health["problems"],
                }
            )
    accept = request.headers.get("Accept", "")
    if "text/plain" in accept and "application/json" not in accept:
        lines = [f"{u['name']} - " + "; ".join(p["description"] for p in u["problems"]) for u in found]
        return web.Response(text="\r\n".join(lines), content_type="text/plain")
    return json_response(found)


_TOPIC_FIELDS = ("published", "rate", "deliveryRate", "subscriptions", "throughput", "volume")
_SUBSCRIPTION_FIELDS = ("delivered", "discarded", "volume", "timeouts", "lag", "rate", "throughput")


@routes.post("/query/topics/metrics")
async def query_topic_metrics(request: web.Request) -> web.Response:
    """Hermes' ``TopicNameWithMetrics`` of every topic, filtered by the query."""

    async def collect(service: ManagementService) -> list[Json]:
        out = []
        for topic in await service.topics():
            m = await service.topic_metrics(topic.name)
            out.append({"name": topic.qualified_name, **{k: m[k] for k in _TOPIC_FIELDS}})
        return out

    return json_response(await selected(request, collect))


@routes.post("/query/subscriptions/metrics")
async def query_subscription_metrics(request: web.Request) -> web.Response:
    """Hermes' ``SubscriptionNameWithMetrics`` of every subscription, filtered by the query."""

    async def collect(service: ManagementService) -> list[Json]:
        out = []
        for sub in await service.subscriptions():
            m = monitoring.hermes_subscription_metrics(await service.subscription_metrics(sub), sub)
            out.append(
                {"topicName": sub.topic_name.qualified, "name": sub.name, **{k: m[k] for k in _SUBSCRIPTION_FIELDS}}
            )
        return out

    return json_response(await selected(request, collect))

"""Operations: subscription and topic metrics, health, consumer groups, last undelivered message,
retransmission, ``/unhealthy``, and the metrics queries."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web

from hermes.domain.names import TopicName
from hermes.domain.subscription import Severity, Subscription
from hermes.domain.topic import Owner
from hermes.errors import NotFoundError
from hermes.http.server import json_response, read_json
from hermes.management import monitoring, query, retransmission
from hermes.management.api.bodies import flag
from hermes.management.api.owners import PLAINTEXT
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService
from hermes.metadata.documents import TOPIC_METRICS, UNDELIVERED_LAST

routes = web.RouteTableDef()

Json = dict[str, Any]
# Kafka's group states as Hermes prints them (the Java client's names)
_GROUP_STATES = {
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
}


async def _subscription(request: web.Request) -> tuple[ManagementService, Subscription]:
    service = request.app[SERVICE]
    sub = await asyncio.to_thread(
        service.repository.get_subscription, topic_name(request), request.match_info["subscription"]
    )
    return service, sub


def _metrics(service: ManagementService, sub: Subscription) -> Json:
    return monitoring.subscription_metrics(service.repository, service.admin, sub)


@routes.get("/topics/{topic}/subscriptions/{subscription}/metrics")
async def subscription_metrics(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    metrics = await asyncio.to_thread(_metrics, service, sub)
    return json_response(monitoring.hermes_subscription_metrics(metrics, sub))


@routes.get("/topics/{topic}/subscriptions/{subscription}/metrics/persistent")
async def persistent_metrics(request: web.Request) -> web.Response:
    """Hermes' lifetime counts (they survive restarts here too: consumers store them with their snapshots)."""
    service, sub = await _subscription(request)
    metrics = await asyncio.to_thread(_metrics, service, sub)
    return json_response({"delivered": metrics["delivered"], "discarded": metrics["discarded"], "volume": 0})


@routes.get("/topics/{topic}/subscriptions/{subscription}/health")
async def subscription_health(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    metrics = await asyncio.to_thread(_metrics, service, sub)
    return json_response(monitoring.subscription_health(metrics))


@routes.get("/topics/{topic}/subscriptions/{subscription}/consumer-groups")
async def consumer_groups(request: web.Request) -> web.Response:
    """Hermes' ``ConsumerGroup`` list: the subscription's Kafka consumer group, its members and, for each
    assigned partition, the committed offset and the log end."""
    service, sub = await _subscription(request)
    topic = sub.topic_name.qualified

    def describe() -> list[Json]:
        group = service.admin.describe_group(sub.consumer_group_id)
        committed = service.admin.committed_offsets(sub.consumer_group_id, topic)
        end = service.admin.end_offsets(topic)
        members = [
            {
                "consumerId": m.member_id,
                "clientId": m.client_id,
                "host": m.host,
                "partitions": [
                    {
                        "partition": p,
                        "topic": t,
                        "currentOffset": committed.get(p, -1),
                        "logEndOffset": end.get(p, -1),
                        "lag": max(0, end.get(p, 0) - committed.get(p, 0)),
                        "offsetMetadata": "",
                        "contentType": sub.content_type.value,
                    }
                    for t, p in m.partitions
                    if t == topic
                ],
            }
            for m in group.members
        ]
        cluster = service.settings.cluster_name
        return [
            {
                "clusterName": cluster,
                "groupId": sub.consumer_group_id,
                "state": _GROUP_STATES.get(group.state, "Unknown"),
                "members": members,
            }
        ]

    return json_response(await asyncio.to_thread(describe))


@routes.get("/topics/{topic}/subscriptions/{subscription}/undelivered/last")
async def last_undelivered(request: web.Request) -> web.Response:
    service, sub = await _subscription(request)
    record = await asyncio.to_thread(service.repository.get_document, UNDELIVERED_LAST, sub.qualified_name.qualified)
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
    dry_run = flag(request, "dryRun")
    cluster = service.settings.cluster_name
    summary = await asyncio.to_thread(
        retransmission.retransmit, service.repository, service.admin, sub, moment, cluster, dry_run
    )
    return json_response(summary)


def _topic_metrics(service: ManagementService, name: TopicName) -> Json:
    """Hermes' ``TopicMetrics`` (decimal strings; ``volume`` and ``throughput``, bytes, not measured), plus our
    lifetime ``delivered`` and ``discarded`` over the topic's subscriptions."""
    service.repository.get_topic(name)
    end = service.admin.end_offsets(name.qualified)
    begin = service.admin.beginning_offsets(name.qualified)
    subs = service.repository.list_subscriptions(name)
    per_sub = [_metrics(service, s) for s in subs]
    now = time.time() * 1000
    frontends = [
        v
        for k, v in service.repository.list_documents(TOPIC_METRICS).items()
        if k.startswith(f"{name.qualified}/") and now - v.get("updatedAt", 0) <= 30_000
    ]
    return {
        "published": sum(end.values()) - sum(begin.values()),
        "volume": 0,
        "rate": monitoring.decimal(sum(float(f.get("publishedPerSecond", 0)) for f in frontends)),
        "deliveryRate": monitoring.decimal(sum(m["codes2xx"] for m in per_sub)),
        "subscriptions": len(subs),
        "throughput": monitoring.UNAVAILABLE,
        "delivered": sum(m["delivered"] for m in per_sub),
        "discarded": sum(m["discarded"] for m in per_sub),
    }


@routes.get("/topics/{topic}/metrics")
async def topic_metrics(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    return json_response(await asyncio.to_thread(_topic_metrics, service, topic_name(request)))


@routes.get("/unhealthy")
@routes.get("/unhealthy/")
async def unhealthy(request: web.Request) -> web.Response:
    """Hermes' ``/unhealthy``: by default only subscriptions whose ``monitoringDetails.severity`` matters
    (``respectMonitoringSeverity=false`` lists all), optionally of one owner, some subscription names or
    topics; ``Accept: text/plain`` answers one ``name - problems`` line each."""
    service = request.app[SERVICE]
    params = request.query
    respect = flag(request, "respectMonitoringSeverity", default=True)
    names = set(params.getall("subscriptionNames", []))
    topics = set(params.getall("qualifiedTopicNames", []))
    owner: Owner | None = None
    if "ownerSourceName" in params or "ownerId" in params:
        owner = Owner(params.get("ownerSourceName", PLAINTEXT), params.get("ownerId", ""))

    def wanted(sub: Subscription) -> bool:
        return not (
            (respect and sub.monitoring_details.severity is Severity.NON_IMPORTANT)
            or (names and sub.name not in names)
            or (topics and sub.topic_name.qualified not in topics)
            or (owner is not None and sub.owner != owner)
        )

    def collect() -> list[Json]:
        out = []
        for sub in filter(wanted, service.repository.list_subscriptions()):
            health = monitoring.subscription_health(_metrics(service, sub))
            if health["problems"]:
                out.append(
                    {
                        "name": sub.name,
                        "topicName": sub.topic_name.qualified,
                        "severity": sub.monitoring_details.severity.value,
                        "problems": health["problems"],
                    }
                )
        return out

    found = await asyncio.to_thread(collect)
    if "text/plain" in request.headers.get("Accept", "") and "application/json" not in request.headers.get(
        "Accept", ""
    ):
        lines = [f"{u['name']} - " + "; ".join(p["description"] for p in u["problems"]) for u in found]
        return web.Response(text="\r\n".join(lines), content_type="text/plain")
    return json_response(found)


@routes.post("/query/topics/metrics")
async def query_topic_metrics(request: web.Request) -> web.Response:
    """Hermes' ``TopicNameWithMetrics`` of every topic, filtered by the query."""
    document = await read_json(request)
    query.parse(document)
    service = request.app[SERVICE]

    def collect() -> list[Json]:
        out = []
        for topic in service.repository.list_topics():
            m = _topic_metrics(service, topic.name)
            out.append(
                {k: m[k] for k in ("published", "rate", "deliveryRate", "subscriptions", "throughput", "volume")}
            )
            out[-1]["name"] = topic.qualified_name
        return out

    return json_response(query.select(document, await asyncio.to_thread(collect)))


@routes.post("/query/subscriptions/metrics")
async def query_subscription_metrics(request: web.Request) -> web.Response:
    """Hermes' ``SubscriptionNameWithMetrics`` of every subscription, filtered by the query."""
    document = await read_json(request)
    query.parse(document)
    service = request.app[SERVICE]

    def collect() -> list[Json]:
        out = []
        for sub in service.repository.list_subscriptions():
            m = monitoring.hermes_subscription_metrics(_metrics(service, sub), sub)
            fields = ("delivered", "discarded", "volume", "timeouts", "lag", "rate", "throughput")
            out.append({"topicName": sub.topic_name.qualified, "name": sub.name, **{k: m[k] for k in fields}})
        return out

    return json_response(query.select(document, await asyncio.to_thread(collect)))

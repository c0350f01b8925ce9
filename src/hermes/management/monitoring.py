"""Monitoring of subscriptions and topics: delivery metrics aggregated over consumer nodes, and health.

Consumers write one metrics snapshot per (subscription, node) to the metadata repository; these functions
read and combine them, so the answers are the same with one process or many consumer nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hermes.broker.admin import NOTE_START, SHARED_READER, BrokerAdmin
from hermes.config import Settings
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription
from hermes.metadata.documents import ATTEMPT_OUTCOMES, COUNTERS, SUBSCRIPTION_METRICS, TOPIC_METRICS
from hermes.metadata.repository import MetadataRepository

Json = dict[str, Any]
# Kafka's group states as Hermes prints them (the Java client's names)
_GROUP_STATES = {
    "STABLE": "Stable",
    "EMPTY": "Empty",
    "DEAD": "Dead",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
}

# A node whose snapshot is older than this no longer contributes to the per-second figures.
_STALE_MS = 30_000


def subscription_metrics(
    repository: MetadataRepository, admin: BrokerAdmin, subscription: Subscription
) -> dict[str, Any]:
    """Hermes' metrics: lifetime ``delivered``/``discarded``; per-second ``timeouts``, ``otherErrors`` and
    ``codes*``; plus ``totals`` (lifetime counts of every counter), ``recentAttempts`` (outcomes of each node's
    last attempts, what health is judged on), ``inflight``, ``rate``, ``maxRate``, ``lag`` and ``nodes``, the
    consumer nodes serving it (those that reported within the last 30 s and have not stopped its consumer since)."""
    prefix = f"{subscription.qualified_name.qualified}/"
    by_node = {
        k.removeprefix(prefix): v
        for k, v in repository.list_documents(SUBSCRIPTION_METRICS).items()
        if k.startswith(prefix)
    }
    snapshots = list(by_node.values())
    now = int(time.time() * 1000)

    def serving(snapshot: dict[str, Any]) -> bool:  # a consumer that stopped wrote its last snapshot marked so
        return not snapshot.get("stopped") and now - int(snapshot.get("updatedAt", 0)) <= _STALE_MS

    fresh = [s for s in snapshots if serving(s)]
    totals = {name: sum(int(s.get(name, 0)) for s in snapshots) for name in COUNTERS}

    def per_second(name: str) -> float:
        return round(sum(float(s.get(f"{name}PerSecond", 0.0)) for s in fresh), 3)

    return {
        "delivered": totals["delivered"],
        "discarded": totals["discarded"],
        "inflight": sum(int(s.get("inflight", 0)) for s in fresh),
        "parkedNow": sum(int(s.get("parkedNow", 0)) for s in fresh),
        "timeouts": per_second("timeouts"),
        "otherErrors": per_second("otherErrors"),
        "codes2xx": per_second("codes2xx"),
        "codes4xx": per_second("codes4xx"),
        "codes5xx": per_second("codes5xx"),
        "rate": round(sum(per_second(a) for a in ATTEMPT_OUTCOMES), 3),
        "maxRate": round(sum(float(s.get("rate", 0.0)) for s in fresh), 3),
        "lag": subscription_lag(admin, subscription),
        "totals": totals,
        "recentAttempts": {
            name: sum(int(s.get("recentAttempts", {}).get(name, 0)) for s in fresh) for name in ATTEMPT_OUTCOMES
        },
        "nodes": sorted(node for node, s in by_node.items() if serving(s)),
        "circuitBreaker": {
            node: s["circuitBreaker"] for node, s in by_node.items() if "circuitBreaker" in s and serving(s)
        },
    }


def decimal(value: float) -> str:
    """Hermes' ``MetricDecimalValue``: a per-second figure as a decimal string."""
    return str(round(float(value), 3))


# Hermes' MetricDecimalValue for a figure this installation does not measure (bytes delivered, so far)
UNAVAILABLE = "unavailable"


def hermes_subscription_metrics(metrics: dict[str, Any], subscription: Subscription) -> dict[str, Any]:
    """Hermes' ``SubscriptionMetrics`` (decimal strings, ``lag`` a string, ``volume`` bytes: not measured, 0),
    plus our ``inflight``, ``maxRate``, lifetime ``totals``, the ``nodes`` serving it and, with retryParking,
    ``parkedNow``."""
    failed = sum(metrics[name] for name in ATTEMPT_OUTCOMES if name != "codes2xx")
    return {
        "delivered": metrics["delivered"],
        "discarded": metrics["discarded"],
        "volume": 0,
        **{name: decimal(metrics[name]) for name in ("timeouts", "otherErrors", "codes2xx", "codes4xx", "codes5xx")},
        "retries": decimal(failed),
        "lag": str(metrics["lag"]),
        "state": subscription.state.value,
        "rate": decimal(metrics["rate"]),
        "throughput": UNAVAILABLE,
        "batchRate": decimal(metrics["rate"] if subscription.is_batch else 0.0),
        "inflight": metrics["inflight"],
        "maxRate": metrics["maxRate"],
        "totals": metrics["totals"],
        "nodes": metrics["nodes"],
        **({"parkedNow": metrics["parkedNow"]} if subscription.serial_policy.retry_parking is not None else {}),
    }


def subscription_lag(admin: BrokerAdmin, subscription: Subscription) -> int:
    topic = subscription.topic_name.qualified
    end = admin.end_offsets(topic)
    committed = admin.committed_offsets(subscription.consumer_group_id, topic)
    return sum(max(0, offset - committed.get(partition, offset)) for partition, offset in end.items())


@dataclass(frozen=True)
class HealthThresholds:
    """A subscription is unhealthy when more than these shares of its recent attempts (each node's last 100
    within 5 minutes) failed that way, or its lag is above ``lag``."""

    timeouts: float = 0.1
    unreachable: float = 0.5
    malfunctioning: float = 0.1
    malformed: float = 0.1
    lag: int = 10_000


def subscription_health(metrics: dict[str, Any], thresholds: HealthThresholds = HealthThresholds()) -> dict[str, Any]:
    recent = metrics["recentAttempts"]
    attempts = sum(recent.values())
    problems = []
    if attempts > 0:
        if recent["timeouts"] / attempts > thresholds.timeouts:
            problems.append({"code": "TIMING_OUT", "description": "Too many requests time out"})
        if recent["otherErrors"] / attempts > thresholds.unreachable:
            problems.append({"code": "UNREACHABLE", "description": "The endpoint cannot be reached"})
        if recent["codes5xx"] / attempts > thresholds.malfunctioning:
            problems.append({"code": "MALFUNCTIONING", "description": "The endpoint answers with 5xx errors"})
        if recent["codes4xx"] / attempts > thresholds.malformed:  # Hermes: only with retryClientErrors; here always
            problems.append(
                {
                    "code": "RECEIVING_MALFORMED_MESSAGES",
                    "description": "The endpoint answers with 4xx errors: it refuses the messages it receives",
                }
            )
    if opened := [b for b in metrics.get("circuitBreaker", {}).values() if b["state"] != "CLOSED"]:
        problems.append(
            {
                "code": "CIRCUIT_OPEN",
                "description": f"The circuit breaker is open on {len(opened)} consumer node(s): "
                + "; ".join(sorted({b["reason"] for b in opened})),
            }
        )
    if metrics["lag"] > thresholds.lag:
        problems.append({"code": "LAGGING", "description": f"{metrics['lag']} messages wait for delivery"})
    return {"status": "UNHEALTHY" if problems else "HEALTHY", "problems": problems}


def circuit_breaker(metrics: dict[str, Any], subscription: Subscription) -> dict[str, Any]:
    """The breaker of each consumer node delivering the subscription, and the state of the most open one."""
    nodes = metrics.get("circuitBreaker", {})
    states = {b["state"] for b in nodes.values()}
    return {
        "enabled": subscription.circuit_breaker is not None,
        "state": next((s for s in ("OPEN", "HALF_OPEN") if s in states), "CLOSED"),
        "nodes": [{"node": node, **nodes[node]} for node in sorted(nodes)],
    }


def topic_metrics(repository: MetadataRepository, admin: BrokerAdmin, name: TopicName) -> Json:
    """Hermes' ``TopicMetrics`` (decimal strings; ``volume`` and ``throughput``, bytes, not measured), plus our
    lifetime ``delivered`` and ``discarded`` over the topic's subscriptions."""
    repository.get_topic(name)
    end = admin.end_offsets(name.qualified)
    begin = admin.beginning_offsets(name.qualified)
    subs = repository.list_subscriptions(name)
    per_sub = [subscription_metrics(repository, admin, s) for s in subs]
    now = time.time() * 1000
    frontends = [
        v
        for k, v in repository.list_documents(TOPIC_METRICS).items()
        if k.startswith(f"{name.qualified}/") and now - v.get("updatedAt", 0) <= _STALE_MS
    ]
    return {
        "published": sum(end.values()) - sum(begin.values()),
        "volume": 0,
        "rate": decimal(sum(float(f.get("publishedPerSecond", 0)) for f in frontends)),
        "deliveryRate": decimal(sum(m["codes2xx"] for m in per_sub)),
        "subscriptions": len(subs),
        "throughput": UNAVAILABLE,
        "delivered": sum(m["delivered"] for m in per_sub),
        "discarded": sum(m["discarded"] for m in per_sub),
    }


def consumer_groups(admin: BrokerAdmin, subscription: Subscription, cluster: str) -> list[Json]:
    """Hermes' ``ConsumerGroup`` list: the subscription's Kafka consumer group, its members and, for each
    assigned partition, the committed offset and the log end. A group read by a node's shared reader has no
    Kafka members: the node that committed each partition's offset stands in as its member."""
    topic = subscription.topic_name.qualified
    group = admin.describe_group(subscription.consumer_group_id)
    committed = admin.committed(subscription.consumer_group_id, topic)
    end = admin.end_offsets(topic)

    def partitions(numbers: list[int]) -> list[Json]:
        return [
            {
                "partition": p,
                "topic": topic,
                "currentOffset": committed[p][0] if p in committed else -1,
                "logEndOffset": end.get(p, -1),
                "lag": max(0, end.get(p, 0) - committed.get(p, (0, ""))[0]),
                "offsetMetadata": "",
                "contentType": subscription.content_type.value,
            }
            for p in numbers
        ]

    members = [
        {
            "consumerId": m.member_id,
            "clientId": m.client_id,
            "host": m.host,
            "partitions": partitions([p for t, p in m.partitions if t == topic]),
        }
        for m in group.members
    ]
    state = _GROUP_STATES.get(group.state, "Unknown")
    if not members:
        by_node: dict[str, list[int]] = {}
        for p, (_, metadata) in sorted(committed.items()):
            if metadata.startswith(SHARED_READER):
                node = metadata.removeprefix(SHARED_READER).split(NOTE_START, 1)[0]
                by_node.setdefault(node, []).append(p)
        members = [
            {"consumerId": node, "clientId": "hermes-shared-reader", "host": node, "partitions": partitions(numbers)}
            for node, numbers in by_node.items()
        ]
        state = "Stable" if members else state
    return [{"clusterName": cluster, "groupId": subscription.consumer_group_id, "state": state, "members": members}]


def inactive_topics(repository: MetadataRepository, admin: BrokerAdmin, settings: Settings) -> list[Json]:
    """Hermes' ``InactiveTopic`` of each topic whose newest message (Kafka's record timestamps say when) is older
    than ``--inactive-topics-threshold``; a topic without messages (never published, or all expired) has no
    such time and is left out. Hermes' detection job also notifies owners; nobody is notified here."""
    whitelist = {name.strip() for name in settings.inactive_topics_whitelist.split(",")}
    names = [t.qualified_name for t in repository.list_topics()]
    newest = admin.newest_timestamps(names)
    threshold = int((time.time() - settings.inactive_topics_threshold) * 1000)
    return [
        {"topic": name, "lastPublishedTsMs": last, "notificationTsMs": [], "whitelisted": name in whitelist}
        for name in names
        if (last := newest.get(name)) is not None and last <= threshold
    ]

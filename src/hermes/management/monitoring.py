"""Monitoring of subscriptions and topics: delivery metrics aggregated over consumer nodes, and health.

Consumers write one metrics snapshot per (subscription, node) to the metadata repository; these functions
read and combine them, so the answers are the same with one process or many consumer nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from hermes.broker.admin import BrokerAdmin
from hermes.domain.subscription import Subscription
from hermes.metadata.documents import ATTEMPT_OUTCOMES, COUNTERS, SUBSCRIPTION_METRICS
from hermes.metadata.repository import MetadataRepository

# A node whose snapshot is older than this no longer contributes to the per-second figures.
_STALE_MS = 30_000


def subscription_metrics(
    repository: MetadataRepository, admin: BrokerAdmin, subscription: Subscription
) -> dict[str, Any]:
    """Hermes' metrics: lifetime ``delivered``/``discarded``; per-second ``timeouts``, ``otherErrors`` and
    ``codes*``; plus ``totals`` (lifetime counts of every counter), ``recentAttempts`` (outcomes of each node's
    last attempts, what health is judged on), ``inflight``, ``rate``, ``maxRate``, ``lag``."""
    prefix = f"{subscription.qualified_name.qualified}/"
    snapshots = [v for k, v in repository.list_documents(SUBSCRIPTION_METRICS).items() if k.startswith(prefix)]
    now = int(time.time() * 1000)
    fresh = [s for s in snapshots if now - int(s.get("updatedAt", 0)) <= _STALE_MS]
    totals = {name: sum(int(s.get(name, 0)) for s in snapshots) for name in COUNTERS}

    def per_second(name: str) -> float:
        return round(sum(float(s.get(f"{name}PerSecond", 0.0)) for s in fresh), 3)

    return {
        "delivered": totals["delivered"],
        "discarded": totals["discarded"],
        "inflight": sum(int(s.get("inflight", 0)) for s in fresh),
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
    }


def decimal(value: float) -> str:
    """Hermes' ``MetricDecimalValue``: a per-second figure as a decimal string."""
    return str(round(float(value), 3))


# Hermes' MetricDecimalValue for a figure this installation does not measure (bytes delivered, so far)
UNAVAILABLE = "unavailable"


def hermes_subscription_metrics(metrics: dict[str, Any], subscription: Subscription) -> dict[str, Any]:
    """Hermes' ``SubscriptionMetrics`` (decimal strings, ``lag`` a string, ``volume`` bytes: not measured, 0),
    plus our ``inflight``, ``maxRate`` and lifetime ``totals``."""
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
    if metrics["lag"] > thresholds.lag:
        problems.append({"code": "LAGGING", "description": f"{metrics['lag']} messages wait for delivery"})
    return {"status": "UNHEALTHY" if problems else "HEALTHY", "problems": problems}

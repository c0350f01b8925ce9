"""The repository's documents: every namespace, who writes it and who reads it, and the record shapes the
writer and its readers share. Keys are in the comments."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# consumers write one snapshot per subscription and consumer node ("<topic>$<subscription>/<node>": the
# subscription-metrics record below); management sums them into a subscription's metrics and health
SUBSCRIPTION_METRICS = "subscription-metrics"
# consumers write a subscription's last discarded message ("<topic>$<subscription>": UndeliveredMessage);
# management serves it as Hermes' ``undelivered/last``
UNDELIVERED_LAST = "undelivered-last"
# each frontend writes its per-topic publish counts ("<topic>/<frontend>"); management reads them for rates
TOPIC_METRICS = "topic-metrics"
# management writes a subscription's retransmission request ("<topic>$<subscription>": offsets by partition,
# requestedAt, retransmissionDate); its consumers read it when told of the change and seek
RETRANSMISSION = "retransmission"
# management writes offline retransmission tasks ("<taskId>": hermes.domain.retransmission_task); the
# pipeline runs them and writes back their status and progress
OFFLINE_RETRANSMISSION_TASKS = "offline-retransmission-tasks"
# management writes a subscription's dead-letter redrives ("<topic>$<subscription>/<id>": hermes.domain.redrive);
# the subscription's consumer runs each and writes back its position, count and status
DEAD_LETTER_REDRIVES = "dead-letter-redrives"
# management's own: its mode ("mode"), each datacenter's readiness ("<datacenter>")
MANAGEMENT = "management"
DATACENTER_READINESS = "datacenter-readiness"
# management writes workload constraints ("topic:<topic>" or "subscription:<topic>$<subscription>": a
# consumersNumber); the cluster's coordinator reads them when it assigns subscriptions to consumer nodes
WORKLOAD_CONSTRAINTS = "workload-constraints"

# Namespaces whose writes make no change notification: every process rewrites them every interval and they are
# read when asked for, so nobody listens to them (their notifications were most of what every process's
# metadata cache read, at a thousand subscriptions)
UNWATCHED = frozenset({SUBSCRIPTION_METRICS, TOPIC_METRICS})

# The subscription-metrics record: a lifetime total of each counter, a ``<counter>PerSecond`` rate of each,
# ``recentAttempts`` by outcome, and ``inflight``, ``rate``, ``mode``, ``lag``, ``updatedAt``; ``stopped`` in the last
# one of a consumer that stopped (its node no longer serves the subscription).
# What status rules (by action) and the stop-retry header decided, in messages (hermes.domain.retry_rules)
RETRY_RULE_COUNTERS = ("ruleRetry", "ruleRetryAfter", "ruleDiscard", "ruleDeadLetter", "retriesStopped")
# (our extensions: ``deadLettered``, discarded messages written to the subscription's dead-letter topic; ``redriven``,
# dead letters a redrive delivered again)
COUNTERS = (
    "delivered",
    "discarded",
    "filtered",
    "timeouts",
    "otherErrors",
    "codes2xx",
    "codes4xx",
    "codes5xx",
    *RETRY_RULE_COUNTERS,
    "deadLettered",
    "redriven",
)
ATTEMPT_OUTCOMES = ("codes2xx", "codes4xx", "codes5xx", "timeouts", "otherErrors")


@dataclass(frozen=True)
class UndeliveredMessage:
    """Hermes' ``undelivered/last`` record."""

    timestamp: int
    subscription: str
    topicName: str  # Hermes field names, camelCase on the wire
    status: str
    reason: str
    message: str
    partition: int
    offset: int
    cluster: str

    def to_document(self) -> dict[str, Any]:
        return asdict(self)

"""Metrics of the frontend: Prometheus, and per-topic publish counts snapshotted to the metadata repository
(so the management API can show every frontend's recent publish rate)."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("hermes_frontend_requests", "Publish requests by topic and HTTP status", ("topic", "status"))
LATENCY = Histogram(
    "hermes_frontend_publish_seconds",
    "Publish request duration",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.065, 0.1, 0.25, 0.4, 0.5, 1.0),
)
PRODUCER_ERRORS = Counter(
    "hermes_frontend_producer_errors", "Messages the broker refused or never acknowledged", ("topic",)
)

JOURNAL_MESSAGES = Gauge("hermes_frontend_journal_messages", "Accepted messages the broker has not acknowledged yet")
JOURNAL_BYTES = Gauge("hermes_frontend_journal_bytes", "Bytes of accepted messages the broker has not acknowledged yet")

TOPIC_METRICS_NAMESPACE = "topic-metrics"

_REQUEST_CHILDREN: dict[tuple[str, str], Any] = {}


def count_request(topic: str, status: int) -> None:
    """Counts one publish request; the Prometheus child is looked up by labels once per (topic, status)."""
    key = (topic, str(status))
    child = _REQUEST_CHILDREN.get(key)
    if child is None:
        child = _REQUEST_CHILDREN[key] = REQUESTS.labels(*key)
    child.inc()


class PublishedCounter:
    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._previous: dict[str, int] = {}
        self._previous_at = time.monotonic()

    def count(self, topic: str) -> None:
        self._counts[topic] = self._counts.get(topic, 0) + 1

    def snapshots(self) -> dict[str, dict[str, Any]]:
        """Per topic: published since start, and per second since the previous call."""
        now = time.monotonic()
        elapsed = max(now - self._previous_at, 1e-6)
        out = {
            topic: {
                "published": n,
                "publishedPerSecond": round((n - self._previous.get(topic, 0)) / elapsed, 3),
                "updatedAt": int(time.time() * 1000),
            }
            for topic, n in self._counts.items()
        }
        self._previous, self._previous_at = dict(self._counts), now
        return out

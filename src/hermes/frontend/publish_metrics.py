"""Metrics of the frontend: Prometheus, and per-topic publish counts snapshotted to the metadata repository
(so the management API can show every frontend's recent publish rate)."""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

PRODUCER_ERRORS = Counter(
    "hermes_frontend_producer_errors", "Messages the broker refused or never acknowledged", ("topic",)
)

JOURNAL_MESSAGES = Gauge("hermes_frontend_journal_messages", "Accepted messages the broker has not acknowledged yet")
JOURNAL_BYTES = Gauge("hermes_frontend_journal_bytes", "Bytes of accepted messages the broker has not acknowledged yet")

TOPIC_METRICS_NAMESPACE = "topic-metrics"

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.065, 0.1, 0.25, 0.4, 0.5, 1.0, float("inf"))


class PublishRequests(Collector):
    """Publish requests by topic and status, and their duration: Prometheus' counter and histogram, kept as
    plain numbers. The client library's ``labels()``, locks and bucket loop cost several times as much per
    request; this is only written by the event loop's thread, and read by the same thread's scrape."""

    def __init__(self) -> None:
        self._requests: dict[tuple[str, int], list[float]] = {}  # (topic, status) -> [count, created]
        self._buckets = [0] * len(_LATENCY_BUCKETS)
        self._sum = 0.0
        self._created = time.time()

    def record(self, topic: str, status: int, seconds: float) -> None:
        counted = self._requests.get((topic, status))
        if counted is None:
            counted = self._requests[(topic, status)] = [0, time.time()]
        counted[0] += 1
        self._buckets[bisect.bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        self._sum += seconds

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        requests, latency = self._families()
        for (topic, status), (count, created) in list(self._requests.items()):
            requests.add_metric([topic, str(status)], count, created=created)
        cumulative, buckets = 0, []
        for bound, count in zip(_LATENCY_BUCKETS, self._buckets, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        latency.add_metric([], buckets, self._sum)
        latency.samples.append(Sample("hermes_frontend_publish_seconds_created", {}, self._created))
        yield requests
        yield latency

    @staticmethod
    def _families() -> tuple[CounterMetricFamily, HistogramMetricFamily]:
        return (
            CounterMetricFamily(
                "hermes_frontend_requests", "Publish requests by topic and HTTP status", labels=("topic", "status")
            ),
            HistogramMetricFamily("hermes_frontend_publish_seconds", "Publish request duration"),
        )


PUBLISH_REQUESTS = PublishRequests()
REGISTRY.register(PUBLISH_REQUESTS)


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

"""Metrics of the frontend: Prometheus, and per-topic publish counts snapshotted to the metadata repository
(so the management API can show every frontend's recent publish rate).

The workers of ``hermes frontend --workers N`` answer scrapes together: their master gives them one directory
(``PROMETHEUS_MULTIPROC_DIR``, prometheus_client's multiprocess mode) in which each worker's counters, histogram and
gauges live in files of its own; a scrape of any worker sums them all, the counters of workers that died included
(so a total never goes back when a worker is restarted). prometheus_client's own process metrics read only the
scraping process's /proc, so each worker writes its ``process_*`` and ``python_gc_*`` figures there too, and a
scrape shows every live worker's with its ``pid`` label."""

from __future__ import annotations

import asyncio
import bisect
import os
import time
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import PLATFORM_COLLECTOR, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import REGISTRY, Collector

MULTIPROCESS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

PRODUCER_ERRORS = Counter(
    "hermes_frontend_producer_errors", "Messages the broker refused or never acknowledged", ("topic",)
)

# livesum: the workers' journals together, a dead worker's left out (the next worker to start takes its journal)
JOURNAL_MESSAGES = Gauge(
    "hermes_frontend_journal_messages",
    "Accepted messages the broker has not acknowledged yet",
    multiprocess_mode="livesum",
)
JOURNAL_BYTES = Gauge(
    "hermes_frontend_journal_bytes",
    "Bytes of accepted messages the broker has not acknowledged yet",
    multiprocess_mode="livesum",
)


_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.065, 0.1, 0.25, 0.4, 0.5, 1.0, float("inf"))
# How often a worker writes its request counts for the other workers' scrapes (its own scrapes write them first).
_SHARE_INTERVAL = 1.0


class PublishRequests(Collector):
    """Publish requests by topic and status, and their duration: prometheus_client's counter and histogram. A
    request adds to plain numbers (the client's ``labels()``, locks and bucket loop cost several µs per
    request), handed to them in bulk by ``flush``: at every scrape, and every second in a worker. Only the
    event loop's thread writes and flushes."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], int] = {}
        self._buckets = [0] * len(_LATENCY_BUCKETS)
        self._sum = 0.0
        self._requests = Counter(
            "hermes_frontend_requests", "Publish requests by topic and HTTP status", ("topic", "status"), registry=None
        )
        self._latency = Histogram(
            "hermes_frontend_publish_seconds", "Publish request duration", buckets=_LATENCY_BUCKETS, registry=None
        )

    def record(self, topic: str, status: int, seconds: float) -> None:
        key = (topic, status)
        self._counts[key] = self._counts.get(key, 0) + 1
        self._buckets[bisect.bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        self._sum += seconds

    def flush(self) -> None:
        counts, self._counts = self._counts, {}
        for (topic, status), count in counts.items():
            self._requests.labels(topic, str(status)).inc(count)
        if counts:
            # prometheus_client has no bulk observe: the histogram's per-bucket values take the counts
            for value, count in zip(self._latency._buckets, self._buckets, strict=True):
                if count:
                    value.inc(count)
            self._latency._sum.inc(self._sum)
            self._buckets, self._sum = [0] * len(_LATENCY_BUCKETS), 0.0

    def describe(self) -> Iterator[Metric]:
        yield from self._requests.describe()
        yield from self._latency.describe()

    def collect(self) -> Iterator[Metric]:
        self.flush()
        yield from self._requests.collect()
        yield from self._latency.collect()


PUBLISH_REQUESTS = PublishRequests()
REGISTRY.register(PUBLISH_REQUESTS)


class _Journal(Protocol):
    @property
    def depth(self) -> int: ...

    @property
    def pending_bytes(self) -> int: ...


class SharedMetrics:
    """A worker's part of the metrics every worker serves (see the module's doc)."""

    def __init__(self, journal: _Journal) -> None:
        self._journal = journal
        self._own = (
            ProcessCollector(registry=None),
            GCCollector(registry=CollectorRegistry()),
        )  # process_*, python_gc_*
        self._process_gauges: dict[str, Gauge] = {}

    @staticmethod
    def enabled() -> bool:
        return MULTIPROCESS_DIR_VARIABLE in os.environ

    def write(self) -> None:
        PUBLISH_REQUESTS.flush()
        JOURNAL_MESSAGES.set(self._journal.depth)
        JOURNAL_BYTES.set(self._journal.pending_bytes)
        for collector in self._own:
            for metric in collector.collect():
                for sample in metric.samples:
                    gauge = self._process_gauges.get(sample.name)
                    if gauge is None:  # liveall: one series per live worker (pid label); a dead one's go with it
                        gauge = Gauge(
                            sample.name,
                            metric.documentation,
                            tuple(sample.labels),
                            registry=None,
                            multiprocess_mode="liveall",
                        )
                        self._process_gauges[sample.name] = gauge
                    (gauge.labels(**sample.labels) if sample.labels else gauge).set(sample.value)

    def exposition(self) -> bytes:
        """Every worker's metrics, this one's up to date, the others' as they wrote them last."""
        self.write()
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        registry.register(PLATFORM_COLLECTOR)  # python_info: the same in every worker
        return generate_latest(registry)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(_SHARE_INTERVAL)
            self.write()


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

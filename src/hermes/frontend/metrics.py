"""Prometheus metrics of the frontend."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter("hermes_frontend_requests", "Publish requests by topic and HTTP status", ("topic", "status"))
LATENCY = Histogram(
    "hermes_frontend_publish_seconds",
    "Publish request duration",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.065, 0.1, 0.25, 0.4, 0.5, 1.0),
)
PRODUCER_ERRORS = Counter(
    "hermes_frontend_producer_errors", "Messages the broker refused or never acknowledged", ("topic",)
)

"""The publish path's cheap parts: waiting for acks with shared timers, message ids, request metrics, a record's trace
context."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from hermes.domain.message import (
    KAFKA_MESSAGE_ID,
    KAFKA_PUBLISH_TIMESTAMP,
    kafka_headers,
    new_message_id,
    parse_kafka_headers,
)
from hermes.frontend.acks import AckTimeouts
from hermes.frontend.publish_metrics import PublishRequests
from hermes.frontend.publishing import Publisher, PublishTimeouts

pytestmark = pytest.mark.unit


class _Wait:
    """A pending publish that records when it expired."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, timeouts: AckTimeouts, expired: list[tuple[str, float]]
    ) -> None:
        self.deadline = loop.time() + timeouts.seconds
        self.answered = False
        self._loop = loop
        self._expired = expired
        timeouts.track(self, loop)

    def expire(self) -> None:
        assert not self.answered
        self.answered = True
        self._expired.append((str(id(self)), self._loop.time()))


def test_waits_without_an_outcome_expire_in_order_and_answered_ones_never() -> None:
    async def scenario() -> tuple[list[str], list[float], list[str]]:
        timeouts = AckTimeouts(0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        expired: list[tuple[str, float]] = []
        waits = [_Wait(loop, timeouts, expired)]
        await asyncio.sleep(0.02)
        waits += [_Wait(loop, timeouts, expired), _Wait(loop, timeouts, expired)]
        waits[2].answered = True  # acknowledged in time: not expired, even though an earlier one is pending
        await asyncio.sleep(0.2)
        return [name for name, _ in expired], [at - started for _, at in expired], [str(id(w)) for w in waits]

    names, times, ids = asyncio.run(scenario())
    assert names == ids[:2]
    assert 0.045 <= times[0] < 1.0 and 0.065 <= times[1] < 1.0, times


def test_message_ids_are_random_version_4_uuids() -> None:
    ids = [new_message_id() for _ in range(1000)]  # several refills of the random pool
    assert len(set(ids)) == 1000
    for message_id in ids:
        parsed = uuid.UUID(message_id)
        assert str(parsed) == message_id and parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", message_id)


def test_request_metrics_are_prometheus_counters_and_a_histogram() -> None:
    registry = CollectorRegistry()
    requests = PublishRequests()
    registry.register(requests)
    requests.record("g.t", 201, 0.002)
    requests.record("g.t", 201, 0.001)
    requests.record("unknown", 404, 7.0)
    text = generate_latest(registry).decode()
    assert 'hermes_frontend_requests_total{status="201",topic="g.t"} 2.0' in text
    assert 'hermes_frontend_requests_total{status="404",topic="unknown"} 1.0' in text
    assert 'hermes_frontend_publish_seconds_bucket{le="0.001"} 1.0' in text  # le: less than or equal
    assert 'hermes_frontend_publish_seconds_bucket{le="0.0025"} 2.0' in text
    assert 'hermes_frontend_publish_seconds_bucket{le="1.0"} 2.0' in text
    assert 'hermes_frontend_publish_seconds_bucket{le="+Inf"} 3.0' in text
    assert "hermes_frontend_publish_seconds_count 3.0" in text and "hermes_frontend_publish_seconds_sum 7.003" in text


def test_kafka_headers_read_back_as_written() -> None:
    written = kafka_headers("id-1", 1_763_877_600_123, 3, {"Trace-Id": "t-1"})
    assert parse_kafka_headers(written) == ("id-1", 1_763_877_600_123, 3, {"Trace-Id": "t-1"}, None)
    assert parse_kafka_headers(kafka_headers("id-2", 5)) == ("id-2", 5, None, {}, None)
    unreadable = [(KAFKA_PUBLISH_TIMESTAMP, b"yesterday"), (KAFKA_MESSAGE_ID, b"\xff\n"), ("other", None)]
    assert parse_kafka_headers(unreadable) == (None, None, None, {}, None), "another producer's: ignored"


def test_a_records_trace_context_is_passed_on_only_when_valid_even_from_the_allow_list() -> None:
    allowed = frozenset({"Traceparent", "tracestate", "X-Tenant"})
    publisher = Publisher(None, PublishTimeouts(), propagated_headers=allowed)  # type: ignore[arg-type]
    valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    record = publisher._record_headers("id", None, {"traceparent": valid, "tracestate": "a=b", "x-tenant": "t1"})
    propagated = [(name, value) for name, value in record if name.startswith("h-")]
    assert sorted(propagated) == [("h-X-Tenant", b"t1"), ("h-traceparent", valid.encode()), ("h-tracestate", b"a=b")]
    invalid = publisher._record_headers("id", None, {"traceparent": "00-cut-short", "tracestate": "a=b"})
    assert [name for name, _ in invalid if name.startswith("h-")] == []

"""The publish path's cheap parts: waiting for acks with shared timers, message ids, request metrics."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from hermes.domain.message import new_message_id
from hermes.errors import BrokerUnavailable
from hermes.frontend.acks import TIMED_OUT, AckTimeouts
from hermes.frontend.metrics import PublishRequests

pytestmark = pytest.mark.unit


def test_an_outcome_before_the_timeout_completes_the_wait() -> None:
    async def scenario() -> tuple[object, object]:
        timeouts = AckTimeouts(5.0)
        loop = asyncio.get_running_loop()
        acked, refused = timeouts.start(loop), timeouts.start(loop)
        refusal = BrokerUnavailable("down")
        loop.call_soon(acked.settled, None)
        loop.call_soon(refused.settled, refusal)
        return await asyncio.wait_for(acked.waiter, 1), (await asyncio.wait_for(refused.waiter, 1)) is refusal

    assert asyncio.run(scenario()) == (None, True)


def test_waits_without_an_outcome_time_out_in_order_and_a_late_outcome_is_handed_over() -> None:
    async def scenario() -> tuple[list[bool], list[float], list[object]]:
        timeouts = AckTimeouts(0.05)
        loop = asyncio.get_running_loop()
        started = loop.time()
        waits = [timeouts.start(loop)]
        await asyncio.sleep(0.02)
        waits.append(timeouts.start(loop))
        waits.append(timeouts.start(loop))
        waits[2].settled(None)  # acknowledged in time: not timed out, even though an earlier one is pending
        ended: list[float] = []
        outcomes = []
        for wait in waits:
            outcomes.append(await asyncio.wait_for(wait.waiter, 2))
            ended.append(loop.time() - started)
        handed: list[object] = []
        waits[0].hand_over(handed.append)  # taken over before its outcome comes
        waits[0].settled(None)
        waits[1].settled(BrokerUnavailable("down"))  # comes before it is taken over
        waits[1].hand_over(handed.append)
        return [o is TIMED_OUT for o in outcomes], ended, handed

    timed_out, ended, handed = asyncio.run(scenario())
    assert timed_out == [True, True, False]
    assert 0.045 <= ended[0] < 1.0 and 0.065 <= ended[1] < 1.0, ended
    assert handed[0] is None and isinstance(handed[1], BrokerUnavailable)


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

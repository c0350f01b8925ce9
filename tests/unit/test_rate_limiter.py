"""The adaptive rate limiter's slots when its mode changes under a waiter, and the failure log."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from hermes.consumers.failure_log import FailureLog, describe
from hermes.consumers.rate import AdaptiveRateLimiter, RateMode, RateSettings
from hermes.consumers.sender.result import SendResult

pytestmark = pytest.mark.unit

SETTINGS = RateSettings(period=0.05, slow_rate=20.0, heartbeat_interval=30.0)


def in_heartbeat() -> AdaptiveRateLimiter:
    limiter = AdaptiveRateLimiter(100, SETTINGS)
    for _ in range(2):  # NORMAL -> SLOW -> HEARTBEAT: periods where every attempt failed
        limiter.record(failed=True)
        limiter._adjust(limiter._period_start + 1)
    assert limiter.mode is RateMode.HEARTBEAT
    return limiter


def test_a_success_in_heartbeat_mode_brings_the_next_slot_to_the_slow_interval() -> None:
    limiter = in_heartbeat()

    async def heartbeat_then_next() -> float:
        await limiter.acquire()  # the heartbeat attempt
        started = time.monotonic()
        waiter = asyncio.create_task(limiter.acquire())  # waits a heartbeat...
        await asyncio.sleep(0.01)
        limiter.record(failed=False)  # ...until the heartbeat attempt succeeds
        await asyncio.wait_for(waiter, 5)
        return time.monotonic() - started

    assert asyncio.run(heartbeat_then_next()) < 1 / SETTINGS.slow_rate + 0.1
    assert limiter.mode in (RateMode.SLOW, RateMode.NORMAL)


def test_reset_wakes_a_waiter_and_keeps_the_hard_maximum() -> None:
    limiter = in_heartbeat()

    async def reset_while_waiting() -> list[float]:
        await limiter.acquire()
        waiters = [asyncio.create_task(limiter.acquire()) for _ in range(3)]
        await asyncio.sleep(0.01)
        limiter.reset()
        granted = []
        for waiter in asyncio.as_completed(waiters, timeout=5):
            await waiter
            granted.append(time.monotonic())
        return granted

    granted = asyncio.run(reset_while_waiting())
    assert limiter.mode is RateMode.NORMAL and limiter.rate == 100
    assert granted[-1] - granted[0] >= 2 / 100 * 0.9, "slots stay 1/rate apart"


def test_failures_are_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hermes.consumers.failure_log")
    failures = FailureLog("g.t$s", interval=0.2)
    failures.failed("HTTP 500 from http://a/")  # the first: at once
    for _ in range(5):
        failures.failed("HTTP 502 from http://a/")
    failures.flush()  # too early: nothing
    time.sleep(0.2)
    failures.flush()
    assert [r.getMessage() for r in caplog.records] == [
        "delivery to g.t$s failing: 1 attempt failed in the last 1 s, last: HTTP 500 from http://a/",
        "delivery to g.t$s failing: 5 attempts failed in the last 1 s, last: HTTP 502 from http://a/",
    ]
    failures.flush()
    assert len(caplog.records) == 2, "nothing new, nothing logged"


def test_a_failure_is_described_without_credentials() -> None:
    assert describe(SendResult.of_status(500), "http://u:pw@h:8080/p?q=1") == "HTTP 500 from http://h:8080/p?q=1"
    assert describe(SendResult.timeout(), "https://u:pw@h/") == "timeout (sending to https://h/)"
    assert describe(SendResult.failure("no OAuth token: ..."), None) == "Message sending failed: no OAuth token: ..."


def test_a_free_slot_is_taken_at_once_and_a_queue_is_not_jumped() -> None:
    limiter = AdaptiveRateLimiter(20, SETTINGS)  # slots 50 ms apart

    async def slots() -> tuple[bool, bool, bool, bool]:
        first = limiter.try_acquire()
        too_soon = limiter.try_acquire()
        waiter = asyncio.create_task(limiter.acquire())  # queues for the next slot
        await asyncio.sleep(0.01)
        limiter._last_slot -= 1  # that slot is due now, but it is the waiter's
        beside_waiter = limiter.try_acquire()
        await asyncio.wait_for(waiter, 5)
        await asyncio.sleep(0.07)
        return first, too_soon, beside_waiter, limiter.try_acquire()

    assert asyncio.run(slots()) == (True, False, False, True)

"""The adaptive rate limiter's slots when its mode changes under a waiter."""

from __future__ import annotations

import asyncio
import time

import pytest

from hermes.consumers.rate import AdaptiveRateLimiter, RateMode, RateSettings

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


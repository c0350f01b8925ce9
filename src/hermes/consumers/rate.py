"""Sending rate: a hard maximum that is never exceeded and, below it, Hermes' adaptive rate.

Every ``period`` the limiter looks at the attempts of the last period (only failures that "slow down",
see ``sender.result.judge``, count as failures) and moves between three modes:

- NORMAL: if most attempts failed it turns SLOW at once (as in Hermes: a subscriber failing everything
  must not keep taking hundreds of attempts a second, from itself or from the process); if more than
  ``tolerance`` failed the rate drops by ``convergence`` of itself; with no failures it climbs
  ``convergence`` of the way back up to the maximum. Below ``slow_rate`` it turns SLOW.
- SLOW: ``slow_rate`` (1 message/s). Every attempt of a period failing turns it HEARTBEAT; a period without
  failures turns it NORMAL again.
- HEARTBEAT: one attempt per ``heartbeat_interval`` (60 s) to poke the subscriber; a success turns it SLOW at
  once, and the next slot comes ``1/slow_rate`` after the successful one rather than a heartbeat later.

The next slot comes the current interval after the last one, or sooner if the last one promised sooner: a
faster pace applies to the slot being waited for, a slower one from the slot after it (as a slot once scheduled
is kept). ``reset`` starts over in NORMAL (a new endpoint).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass
from enum import StrEnum


class RateMode(StrEnum):
    NORMAL = "NORMAL"
    SLOW = "SLOW"
    HEARTBEAT = "HEARTBEAT"


@dataclass(frozen=True)
class RateSettings:
    period: float = 1.0  # seconds between adjustments
    tolerance: float = 0.05
    convergence: float = 0.2
    slow_rate: float = 1.0
    heartbeat_interval: float = 60.0


class AdaptiveRateLimiter:
    def __init__(self, max_rate: float, settings: RateSettings | None = None) -> None:
        self.settings = settings or RateSettings()
        self.max_rate = max_rate
        self.rate = max_rate
        self.mode = RateMode.NORMAL
        self._last_slot = -math.inf
        self._spacing = 0.0  # the interval when the last slot was granted
        self._attempts = 0
        self._failures = 0
        self._period_start = time.monotonic()
        self._queue = asyncio.Lock()  # fair: only the first waiter watches the clock
        self._queued = 0  # acquirers in or queueing for the lock (a free lock may still have a waiter to wake)
        self._changed = asyncio.Event()  # the mode changed: the first waiter looks at the clock again

    def set_max_rate(self, max_rate: float) -> None:
        self.max_rate = max_rate
        self.rate = min(self.rate, max_rate) if self.mode is RateMode.NORMAL else self.rate

    def reset(self) -> None:
        """Starts over in NORMAL at the maximum rate, waking the waiters: what the limiter learnt was about
        another endpoint. The hard maximum still holds from the last slot."""
        self._attempts = self._failures = 0
        self._period_start = time.monotonic()
        self._enter(RateMode.NORMAL, self.max_rate)

    @property
    def interval(self) -> float:
        if self.mode is RateMode.HEARTBEAT:
            return self.settings.heartbeat_interval
        return 1.0 / max(self.rate, 1e-9)

    async def acquire(self) -> None:
        """Waits for the next sending slot: slots are spaced so the current rate is never exceeded.
        Waiters queue: each slot wakes one of them, not all (a failing subscription's hundred retries waking
        together at every slot kept the event loop busy for every other subscription)."""
        self._queued += 1
        try:
            async with self._queue:
                while True:
                    now = time.monotonic()
                    slot = self._slot(now)
                    if slot <= now:
                        return
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(slot - now, self.settings.period)):
                            await self._changed.wait()
        finally:
            self._queued -= 1

    def try_acquire(self) -> bool:
        """Takes the next sending slot if it is free now and nobody queues for it (no waiting: the common case
        of a subscriber below its rate costs no lock, timeout or task here)."""
        if self._queued:
            return False
        now = time.monotonic()
        return self._slot(now) <= now

    def _slot(self, now: float) -> float:
        """The next slot's time; taken when it is ``now`` or earlier (idle time is not saved up: no bursts above
        the rate)."""
        self._adjust(now)
        interval = self.interval
        slot = self._last_slot + min(self._spacing, interval)
        if slot <= now:
            self._last_slot, self._spacing = now, interval
        return slot

    def record(self, failed: bool) -> None:
        self._attempts += 1
        self._failures += int(failed)
        if self.mode is RateMode.HEARTBEAT and not failed:
            self._enter(RateMode.SLOW, self.settings.slow_rate)

    def _adjust(self, now: float) -> None:
        if now - self._period_start < self.settings.period:
            return
        attempts, failures = self._attempts, self._failures
        self._attempts = self._failures = 0
        self._period_start = now
        if attempts == 0:
            return
        ratio = failures / attempts
        s = self.settings
        if self.mode is RateMode.NORMAL:
            if failures > attempts - failures:
                self._enter(RateMode.SLOW, s.slow_rate)
            elif ratio > s.tolerance:
                self.rate *= 1 - s.convergence
                if self.rate < s.slow_rate:
                    self._enter(RateMode.SLOW, s.slow_rate)
            else:
                self.rate = min(self.max_rate, self.rate + (self.max_rate - self.rate) * s.convergence + 1)
        elif self.mode is RateMode.SLOW:
            if failures == attempts:
                self._enter(RateMode.HEARTBEAT, s.slow_rate)
            elif ratio <= s.tolerance:
                self._enter(RateMode.NORMAL, min(self.max_rate, max(s.slow_rate * 2, 1.0)))

    def _enter(self, mode: RateMode, rate: float) -> None:
        self.mode = mode
        self.rate = min(rate, self.max_rate)
        self._changed.set()

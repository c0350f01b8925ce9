"""A subscription's circuit breaker on this node (``circuitBreaker``, our extension): when its endpoint keeps
failing, attempts pause instead of going on at the rate limiter's slow pace.

- CLOSED: attempts go. ``consecutiveFailures`` failed attempts in a row, or at least ``minimumRequests`` attempts
  in the last ``window`` of which ``failureRatio`` or more failed, open it.
- OPEN: no attempt goes; the messages wait (their messageTtl still counts, and discards them when it ends).
  ``probeInterval`` after opening it turns HALF_OPEN and lets one attempt go: the probe.
- HALF_OPEN: one probe per ``probeInterval``. A successful attempt closes it, a failed one opens it again.

A failed attempt is one that is retried or slows the rate down (``sender/result.py``): 5xx, timeouts, network
errors, no address resolved, 429; a 4xx that is not retried is the subscriber's answer about that message, so it
counts as a success. ``suspension_due`` tells when it stayed open for ``suspendAfter``.

Pure state on an injected clock, plus ``wait`` for the deliveries that wait for a probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from hermes.domain.subscription import CircuitBreakerPolicy

# the window's attempts are counted in this many slices (a ratio over the last window, to within a slice)
_SLICES = 20


class BreakerState(StrEnum):
    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"


@dataclass
class _Slice:
    start: float
    attempts: int = 0
    failures: int = 0


# (the new state, the one it left, why)
Listener = Callable[[BreakerState, BreakerState, str], None]


class CircuitBreaker:
    def __init__(
        self,
        policy: CircuitBreakerPolicy | None,
        listener: Listener | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self._listener = listener
        self._clock = clock
        self.state = BreakerState.CLOSED
        self.opened = 0  # times it opened after being closed
        self.reason = ""  # why it last changed state
        self.opened_because = ""  # why it last opened after being closed
        self.since = 0.0  # when it left CLOSED (clock time)
        self.since_ms = 0  # the same in epoch millis, for people
        self._consecutive = 0
        self._slices: deque[_Slice] = deque()
        self._next_probe = 0.0
        self._changed = asyncio.Event()  # set on every change of state or policy: waiters look again

    @property
    def closed(self) -> bool:
        return self.state is BreakerState.CLOSED

    def set_policy(self, policy: CircuitBreakerPolicy | None) -> None:
        """A changed setting applies from now on; without one, the breaker closes."""
        self.policy = policy
        if policy is None and not self.closed:
            self._enter(BreakerState.CLOSED, "the circuit breaker was turned off")
        self._changed.set()

    def reset(self, reason: str) -> None:
        """Closes and forgets the failures: they were another endpoint's."""
        self._consecutive = 0
        self._slices.clear()
        if not self.closed:
            self._enter(BreakerState.CLOSED, reason)

    def admit(self) -> float | None:
        """None when an attempt may go now (when open, as the probe of this interval); else the seconds until the
        next probe."""
        if self.closed or self.policy is None:
            return None
        now = self._clock()
        if now < self._next_probe:
            return self._next_probe - now
        self._next_probe = now + self.policy.probe_interval / 1000
        if self.state is BreakerState.OPEN:
            self._enter(BreakerState.HALF_OPEN, "probing the endpoint with one attempt")
        return None

    async def wait(self) -> bool:
        """Waits until an attempt may go; True when it goes as a probe (the breaker not closed)."""
        while (delay := self.admit()) is not None:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._changed.wait()
        return not self.closed

    def record(self, failed: bool) -> None:
        """Counts an attempt's result."""
        policy = self.policy
        if policy is None:
            return
        if not self.closed:  # a probe's result (or that of an attempt sent before it opened)
            if not failed:
                self._enter(BreakerState.CLOSED, "an attempt succeeded")
            elif self.state is BreakerState.HALF_OPEN:
                self._enter(BreakerState.OPEN, "the probe failed")
            return
        now = self._clock()
        self._consecutive = self._consecutive + 1 if failed else 0
        attempts, failures = self._count(now, failed, policy.window / 1000)
        if self._consecutive >= policy.consecutive_failures:
            self._open(now, f"{self._consecutive} attempts in a row failed")
        elif attempts >= policy.minimum_requests and failures >= policy.failure_ratio * attempts:
            self._open(now, f"{failures} of the {attempts} attempts of the last {policy.window} ms failed")

    def suspension_due(self) -> bool:
        """Whether it has not been closed for ``suspendAfter``."""
        policy = self.policy
        if self.closed or policy is None or policy.suspend_after is None:
            return False
        return (self._clock() - self.since) * 1000 >= policy.suspend_after

    def _count(self, now: float, failed: bool, window: float) -> tuple[int, int]:
        """Adds the attempt to the window's slices; the attempts and failures of the window."""
        slices = self._slices
        while slices and slices[0].start <= now - window:
            slices.popleft()
        if not slices or now - slices[-1].start >= window / _SLICES:
            slices.append(_Slice(now))
        slices[-1].attempts += 1
        slices[-1].failures += int(failed)
        return sum(s.attempts for s in slices), sum(s.failures for s in slices)

    def _open(self, now: float, reason: str) -> None:
        assert self.policy is not None
        self.opened += 1
        self.since, self.since_ms = now, int(time.time() * 1000)
        self._next_probe = now + self.policy.probe_interval / 1000
        self.opened_because = reason
        self._enter(BreakerState.OPEN, reason)

    def _enter(self, state: BreakerState, reason: str) -> None:
        previous, self.state, self.reason = self.state, state, reason
        if state is BreakerState.CLOSED:
            self._consecutive = 0
            self._slices.clear()
        self._changed.set()
        if self._listener is not None:
            self._listener(state, previous, reason)

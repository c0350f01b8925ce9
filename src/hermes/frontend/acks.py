"""Waiting for the broker's ack of one publish, within the topic's ack timeout, at little cost per message.

Each publish waits on one future. The broker's outcome or the timeout completes it, whichever comes first. The
timeouts share one timer per timeout value: publishes with the same timeout expire in the order they started,
so a queue ordered by deadline and one timer set to its oldest entry replace a timer per publish.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Final

# What a timed-out wait returns (a delivery returns None or the broker's error); never raised.
TIMED_OUT: Final = TimeoutError("the broker did not acknowledge within the ack timeout")
# A timer may fire this much before its deadline (the event loop's clock resolution).
_EARLY = 0.001


class AckWait:
    """One publish waiting for its ack. The outcome is recorded even after a timeout, and handed to ``then``
    (set by whoever took the message over after the timeout: the journal)."""

    __slots__ = ("deadline", "done", "error", "then", "waiter")

    def __init__(self, waiter: asyncio.Future[Exception | None], deadline: float) -> None:
        self.waiter = waiter
        self.deadline = deadline
        self.done = False
        self.error: Exception | None = None
        self.then: Callable[[Exception | None], None] | None = None

    def settled(self, error: Exception | None) -> None:
        self.done, self.error = True, error
        if not self.waiter.done():
            self.waiter.set_result(error)
        elif self.then is not None:
            self.then(error)

    def hand_over(self, then: Callable[[Exception | None], None]) -> None:
        """After a timeout: ``then`` gets the outcome, now if it has come meanwhile, else when it comes."""
        if self.done:
            then(self.error)
        else:
            self.then = then


class AckTimeouts:
    """Expires the waits of one timeout value, with one timer for all of them."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._waits: deque[AckWait] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> AckWait:
        wait = AckWait(loop.create_future(), loop.time() + self.seconds)
        self._waits.append(wait)
        if self._timer is None:
            self._timer = loop.call_at(wait.deadline, self._expire, loop)
        return wait

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time() + _EARLY
        waits = self._waits
        while waits and (waits[0].waiter.done() or waits[0].deadline <= now):
            waiter = waits.popleft().waiter
            if not waiter.done():
                waiter.set_result(TIMED_OUT)
        if waits:
            self._timer = loop.call_at(waits[0].deadline, self._expire, loop)

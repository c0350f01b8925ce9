"""Expiring the publishes that wait for the broker's ack, at little cost per message.

Publishes with the same ack timeout expire in the order they started, so a queue ordered by deadline and one timer
set to its oldest entry replace a timer per publish.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

# A timer may fire this much before its deadline (the event loop's clock resolution).
_EARLY = 0.001


class Pending(Protocol):
    """A publish waiting for its ack: ``answered`` once the broker's outcome or the timeout answered it."""

    deadline: float
    answered: bool

    def expire(self) -> None:
        """The timeout came first (called once, and only while not ``answered``)."""


class AckTimeouts:
    """Expires the pending publishes of one timeout value, with one timer for all of them."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._waits: deque[Pending] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def track(self, pending: Pending, loop: asyncio.AbstractEventLoop) -> None:
        """``pending.deadline`` must be ``loop.time() + seconds``, set now."""
        self._waits.append(pending)
        if self._timer is None:
            self._timer = loop.call_at(pending.deadline, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time() + _EARLY
        waits = self._waits
        while waits and (waits[0].answered or waits[0].deadline <= now):
            pending = waits.popleft()
            if not pending.answered:
                pending.expire()
        if waits:
            self._timer = loop.call_at(waits[0].deadline, self._expire, loop)

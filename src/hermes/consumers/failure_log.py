"""Failed delivery attempts and discarded messages in the log: at most one INFO line of each per subscription and
interval, summing up what happened since the previous line, e.g. ``delivery to g.topic$sub failing: 37 attempts
failed in the last 30 s, last: HTTP 500 from http://host/path`` and ``delivery to g.topic$sub gave up: 12 messages
discarded in the last 30 s, last reason: Message sending failed with status code:500``.

A subscriber that fails everything is attempted hundreds of times a second before the rate limiter slows it
down: a line per attempt would bury every other line. Addresses are logged without credentials; failure texts
come from ``SendResult`` and never hold a secret (see ``sender/oauth.py``).
"""

from __future__ import annotations

import logging
import math
import time
from urllib.parse import urlsplit, urlunsplit

from hermes.consumers.sender.result import SendResult

log = logging.getLogger(__name__)


def describe(result: SendResult, url: str | None) -> str:
    """One failed attempt: what happened and where, without the address's credentials."""
    if url is None:
        return result.description
    scheme, netloc, path, query, fragment = urlsplit(url)
    address = urlunsplit((scheme, netloc.rpartition("@")[2], path, query, fragment))
    if result.status is not None:
        return f"HTTP {result.status} from {address}"
    return f"{result.error} (sending to {address})"


class _Tally:
    """Events of one kind since the previous line about them, logged at most once per interval."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self.count = 0
        self.last = ""
        self._since = time.monotonic()  # the previous line, or the start
        self._next_line = self._since  # the first event is logged at once

    def add(self, count: int, description: str) -> None:
        self.count += count
        self.last = description

    def due(self) -> float | None:
        """When a line is due now: the seconds it covers (and the tally starts over); else None."""
        now = time.monotonic()
        if not self.count or now < self._next_line:
            return None
        seconds = math.ceil(now - self._since)
        self.count = 0
        self._since = now
        self._next_line = now + self._interval
        return seconds


class FailureLog:
    """One subscription's failed attempts and discarded messages, each summed up in at most one INFO line per
    interval: a subscriber that fails everything fails (and loses) hundreds of messages a second."""

    def __init__(self, subscription: str, interval: float) -> None:
        self._subscription = subscription
        self._failed = _Tally(interval)
        self._discarded = _Tally(interval)

    def failed(self, description: str) -> None:
        self._failed.add(1, description)
        self.flush()

    def discarded(self, count: int, reason: str) -> None:
        self._discarded.add(count, reason)
        self.flush()

    @property
    def pending(self) -> bool:
        """Whether events wait for their line (``flush`` has something to do, now or later)."""
        return bool(self._failed.count or self._discarded.count)

    def flush(self) -> None:
        """Logs what was counted since the previous line once that line is an interval old; called after each
        event and periodically, so the last failures before a recovery are logged too."""
        count, last = self._failed.count, self._failed.last
        if (seconds := self._failed.due()) is not None:
            log.info(
                "delivery to %s failing: %d %s failed in the last %d s, last: %s",
                self._subscription,
                count,
                "attempt" if count == 1 else "attempts",
                seconds,
                last,
            )
        count, last = self._discarded.count, self._discarded.last
        if (seconds := self._discarded.due()) is not None:
            log.info(
                "delivery to %s gave up: %d %s discarded in the last %d s, last reason: %s",
                self._subscription,
                count,
                "message" if count == 1 else "messages",
                seconds,
                last,
            )

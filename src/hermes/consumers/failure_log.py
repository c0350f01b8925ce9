"""Failed delivery attempts in the log: at most one INFO line per subscription and interval, summing up the
attempts that failed since the previous line, e.g. ``delivery to g.topic$sub failing: 37 attempts failed in the
last 30 s, last: HTTP 500 from http://host/path``.

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


class FailureLog:
    def __init__(self, subscription: str, interval: float) -> None:
        self._subscription = subscription
        self._interval = interval
        self._count = 0
        self._last = ""
        self._since = time.monotonic()  # the previous line, or the start
        self._next_line = self._since  # the first failure is logged at once

    def failed(self, description: str) -> None:
        self._count += 1
        self._last = description
        self.flush()

    def flush(self) -> None:
        """Logs the failures counted since the previous line once that line is an interval old; called after
        each failure and periodically, so the last failures before a recovery are logged too."""
        now = time.monotonic()
        if not self._count or now < self._next_line:
            return
        attempts = "attempt" if self._count == 1 else "attempts"
        log.info(
            "delivery to %s failing: %d %s failed in the last %d s, last: %s",
            self._subscription,
            self._count,
            attempts,
            math.ceil(now - self._since),
            self._last,
        )
        self._count = 0
        self._since = now
        self._next_line = now + self._interval

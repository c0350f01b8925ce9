"""The brake on guessing passwords: each client (by address) may fail to authenticate ``limit`` times per
``window`` seconds; beyond that its attempts are refused unchecked until the window ends. Attempts still being
checked count too, one per distinct credential, so that a burst of concurrent guesses cannot all be checked
before the first failure is counted. Failures are logged (at most a line per address per window) and counted in
``hermes_failed_logins_total``."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Iterator

from prometheus_client import Counter

from hermes.errors import TooManyFailedLogins

log = logging.getLogger(__name__)

FAILED_LOGINS = Counter(
    "hermes_failed_logins",
    "Refused authentication attempts: wrong credentials, or refused unchecked by the brake (braked)",
    ("reason",),
)


class _Client:
    __slots__ = ("count", "in_flight", "logged", "started", "unlogged")

    def __init__(self, now: float) -> None:
        self.started = now  # the window's start
        self.count = 0  # failures in the window
        self.in_flight: Tally[bytes] = Tally()  # credentials being checked now, by their keyed digest
        self.logged = float("-inf")  # when its last log line was written
        self.unlogged = 0  # failures since then


class FailedLogins:
    def __init__(self, limit: int = 10, window: float = 60.0, clients: int = 100_000) -> None:
        self.limit = limit
        self.window = window
        self.clients = clients  # bounds the memory a flood of addresses can take
        self._clients: OrderedDict[str, _Client] = OrderedDict()

    def _client(self, client: str) -> _Client:
        now = time.monotonic()
        entry = self._clients.get(client)
        if entry is None:
            entry = self._clients[client] = _Client(now)
            if len(self._clients) > self.clients:
                self._clients.popitem(last=False)
        elif now - entry.started >= self.window:
            entry.started, entry.count = now, 0
        return entry

    def check(self, client: str) -> None:
        """Raises ``TooManyFailedLogins`` while the client's failures and attempts in flight reach the limit."""
        entry = self._clients.get(client)
        if entry is None:
            return
        remaining = entry.started + self.window - time.monotonic()
        if remaining <= 0:
            remaining = self.window  # a new window: only attempts in flight count
            busy = len(entry.in_flight) >= self.limit
        else:
            busy = entry.count + len(entry.in_flight) >= self.limit
        if busy:
            FAILED_LOGINS.labels("braked").inc()
            raise TooManyFailedLogins(f"too many failed logins; try again in {remaining:.0f} s", remaining)

    @contextlib.contextmanager
    def attempt(self, client: str, credential: bytes) -> Iterator[None]:
        """A check of ``credential`` (a keyed digest) in flight; the same credential sent concurrently counts once."""
        self.check(client)
        entry = self._client(client)
        entry.in_flight[credential] += 1
        try:
            yield
        finally:
            entry.in_flight[credential] -= 1
            if entry.in_flight[credential] <= 0:
                del entry.in_flight[credential]

    def failed(self, client: str, user: str) -> None:
        """A wrong credential: counted, and logged unless this address was logged less than a window ago."""
        FAILED_LOGINS.labels("wrong_credentials").inc()
        entry = self._client(client)
        self._clients.move_to_end(client)
        entry.count += 1
        entry.unlogged += 1
        now = time.monotonic()
        if now - entry.logged >= self.window:
            log.warning(
                "failed login as %r from %s: %d failure(s) since this address was last logged, %d in this window",
                user[:64],
                client,
                entry.unlogged,
                entry.count,
            )
            entry.logged, entry.unlogged = now, 0

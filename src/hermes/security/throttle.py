"""The brake on guessing passwords: each client (by address) may fail to authenticate ``limit`` times per
``window`` seconds; beyond that its attempts are refused unchecked until the window ends."""

from __future__ import annotations

import time
from collections import OrderedDict

from hermes.errors import TooManyFailedLogins


class FailedLogins:
    def __init__(self, limit: int = 10, window: float = 60.0, clients: int = 100_000) -> None:
        self.limit = limit
        self.window = window
        self.clients = clients  # bounds the memory a flood of addresses can take
        self._failures: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def check(self, client: str) -> None:
        started, count = self._failures.get(client, (0.0, 0))
        remaining = started + self.window - time.monotonic()
        if count >= self.limit and remaining > 0:
            raise TooManyFailedLogins(f"too many failed logins; try again in {remaining:.0f} s", remaining)

    def failed(self, client: str) -> None:
        now = time.monotonic()
        started, count = self._failures.pop(client, (now, 0))
        if now - started >= self.window:
            started, count = now, 0
        self._failures[client] = (started, count + 1)
        if len(self._failures) > self.clients:
            self._failures.popitem(last=False)

"""What every HTTP port grants a client: how long it may take to send a request's headers and body, how long an
idle connection stays open, how many connections a port holds, how large a request's head may be.

Defaults are a production reverse proxy's (docs/operations.md says which and why); tests use short ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

# aiohttp's limits, which the management and status ports enforce: a request line or one header over this is
# refused, so the publishing port refuses the same; the whole head is bounded too (aiohttp: 128 headers).
MAX_FIELD_BYTES = 8190
MAX_HEAD_BYTES = 64 * 1024
# Seconds a refused client's data is still read and dropped after its answer, so that closing does not reset the
# connection before the client read the answer (nginx's lingering close; aiohttp's lingering_time, 10 s by default)
LINGER = 2.0


class _EdgeSettings(Protocol):
    """The settings' fields named after the limits (``config.py``: ``--http-*``)."""

    @property
    def http_header_timeout(self) -> float: ...
    @property
    def http_body_timeout(self) -> float: ...
    @property
    def http_body_min_rate(self) -> int: ...
    @property
    def http_keepalive_timeout(self) -> float: ...
    @property
    def http_max_connections(self) -> int: ...


@dataclass(frozen=True)
class EdgeLimits:
    """``header_timeout``: seconds from a connection's start (or a keep-alive request's first byte) to the end of
    its request's headers. ``body_timeout`` and ``body_min_rate``: a body must be whole within ``body_timeout``
    seconds of its headers plus one second per ``body_min_rate`` bytes received (so a large body may take long
    while it keeps coming). ``keepalive_timeout``: seconds an idle connection stays open after an answer.
    ``max_connections``: open connections per port; a new one beyond closes the longest idle, or is refused."""

    header_timeout: float = 60.0
    body_timeout: float = 60.0
    body_min_rate: int = 500
    keepalive_timeout: float = 75.0
    max_connections: int = 4096

    @classmethod
    def of(cls, settings: _EdgeSettings) -> EdgeLimits:
        return cls(
            settings.http_header_timeout,
            settings.http_body_timeout,
            settings.http_body_min_rate,
            settings.http_keepalive_timeout,
            settings.http_max_connections,
        )

    @property
    def tick(self) -> float:
        """Seconds between two looks at the connections' deadlines (a deadline is met within this)."""
        return max(0.05, min(1.0, self.header_timeout / 4, self.body_timeout / 4, self.keepalive_timeout / 4))

    def body_deadline(self, started: float, received: int) -> float:
        return started + self.body_timeout + received / self.body_min_rate


DEFAULT_LIMITS = EdgeLimits()


class _Connection(Protocol):
    @property
    def idle(self) -> bool: ...

    def abort(self) -> None: ...


_C = TypeVar("_C", bound=_Connection)


def make_room(connections: set[_C], limit: int, idle_since: Callable[[_C], float], what: str) -> bool:
    """Whether one more connection may be admitted: at ``limit``, the longest idle one is closed to make room;
    with none idle, none is admitted."""
    if len(connections) < limit:
        return True
    idle = [connection for connection in connections if connection.idle]
    if not idle:
        logging.getLogger(__name__).warning("the %s refused a connection: %d are open", what, len(connections))
        return False
    oldest = min(idle, key=idle_since)
    connections.discard(oldest)
    oldest.abort()
    return True

"""When a request may be sent again: only when the first one cannot have taken effect (it never reached the
server, or the server refused it), or when taking effect twice changes nothing (GET, PUT, DELETE). A publish whose
answer was lost is not sent again: the message may already be in Kafka, and a second one would be a duplicate;
unless it has an Idempotency-Key, whose repeat stores nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from hermes.errors import HermesError, ServiceUnavailable

# Refusals: the server took nothing (429: too many failed logins or a limit; 503: it cannot serve now)
REFUSED = frozenset({429, 503})
# The connection or the pool gave out before a byte of the request was sent
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts``: in all, the first included; waits double from ``backoff`` seconds up to ``max_backoff``, or
    follow the server's ``Retry-After`` (up to ``max_backoff``)."""

    attempts: int = 3
    backoff: float = 0.1
    max_backoff: float = 5.0

    def wait(self, attempt: int, headers: Mapping[str, str] | None = None) -> float:
        after = (headers or {}).get("Retry-After", "")
        if after.replace(".", "", 1).isdigit():
            return min(float(after), self.max_backoff)
        return float(min(self.backoff * 2**attempt, self.max_backoff))

    def retries_status(self, attempt: int, status: int) -> bool:
        return attempt + 1 < self.attempts and status in REFUSED

    def retries_error(self, attempt: int, error: httpx.TransportError, idempotent: bool) -> bool:
        return attempt + 1 < self.attempts and (idempotent or isinstance(error, NOT_SENT))


def unreachable(url: str, error: httpx.TransportError) -> HermesError:
    """The transport's error as ours: the URL and what happened, never the request's credentials."""
    return ServiceUnavailable(f"{url}: {type(error).__name__}: {error or 'no answer'}")

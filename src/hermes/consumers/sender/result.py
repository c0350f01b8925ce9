"""The outcome of one delivery attempt."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SendResult:
    status: int | None = None  # HTTP status, None on a network error or timeout
    timed_out: bool = False
    error: str | None = None
    retry_after: float | None = None  # seconds, from a Retry-After header
    reauthorize: bool = False  # a 401 from an OAuth-secured subscriber: retried with a new token

    @classmethod
    def of_status(cls, status: int, retry_after: float | None = None) -> SendResult:
        return cls(status=status, retry_after=retry_after)

    @classmethod
    def timeout(cls) -> SendResult:
        return cls(timed_out=True, error="timeout")

    @classmethod
    def failure(cls, error: str) -> SendResult:
        return cls(error=error)

    @property
    def succeeded(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def description(self) -> str:
        if self.status is not None:
            return f"Message sending failed with status code:{self.status}"
        return f"Message sending failed: {self.error}"

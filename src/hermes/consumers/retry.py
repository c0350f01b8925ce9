"""What to do after an attempt: the success/failure table of the Hermes subscribing guide, and backoff.

| status              | retryClientErrors | Retry-After | retry | slow down |
|---------------------|-------------------|-------------|-------|-----------|
| 2xx                 | -                 | -           | no    | no        |
| 401, OAuth policy   | -                 | -           | yes   | no        |
| 4xx (except 429)    | false             | -           | no    | no        |
| 4xx (except 429)    | true              | -           | yes   | yes       |
| 429                 | false             | -           | no    | yes       |
| 429                 | true              | no          | yes   | yes       |
| 429                 | true              | yes         | yes   | no        |
| 5xx (except 503)    | -                 | -           | yes   | yes       |
| 503                 | -                 | no          | yes   | yes       |
| 503                 | -                 | yes         | yes   | no        |
| network error/timeout | -               | -           | yes   | yes       |
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes.consumers.sender.result import SendResult


@dataclass(frozen=True)
class Verdict:
    retry: bool
    slow_down: bool

    @property
    def delivered(self) -> bool:
        """Handled without a retry: success, or a client error the subscriber will never accept."""
        return not self.retry


def judge(result: SendResult, retry_client_errors: bool) -> Verdict:
    status = result.status
    if result.succeeded:
        return Verdict(retry=False, slow_down=False)
    if status is None:
        return Verdict(retry=True, slow_down=True)
    if result.reauthorize:  # an expired token is no sign of overload
        return Verdict(retry=True, slow_down=False)
    has_retry_after = result.retry_after is not None
    if status == 429:
        if not retry_client_errors:
            return Verdict(retry=False, slow_down=True)
        return Verdict(retry=True, slow_down=not has_retry_after)
    if 400 <= status < 500:
        return Verdict(retry=retry_client_errors, slow_down=retry_client_errors)
    if status == 503:
        return Verdict(retry=True, slow_down=not has_retry_after)
    return Verdict(retry=True, slow_down=True)  # 5xx, and anything else that is not 2xx


@dataclass(frozen=True)
class Backoff:
    """``current = previous * multiplier``, from ``initial`` up to ``maximum`` (seconds)."""

    initial: float
    multiplier: float
    maximum: float

    def delay(self, retries_so_far: int, retry_after: float | None = None) -> float:
        """The wait before the next attempt; a subscriber's Retry-After replaces the computed backoff."""
        if retry_after is not None:
            return retry_after
        try:
            grown = self.initial * self.multiplier**retries_so_far
        except OverflowError:  # a few hundred retries at a multiplier of 10: far beyond any maximum
            return self.maximum
        return min(grown, self.maximum)

"""The outcome of one delivery attempt, and what it means: the success/failure table of the Hermes subscribing
guide.

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

import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from hermes.errors import HermesError


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
    def delivered(cls) -> SendResult:
        """A message a JMS broker confirmed: counted as the 2xx of an HTTP subscriber."""
        return cls(status=200)

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


def network_failure(exc: Exception, url: str) -> str:
    """What kept a request from an answer, in words (``host not found: my-servce.local``, not ``gaierror``)."""
    parts = urlsplit(url)
    host = parts.hostname or url
    address = f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    if isinstance(exc, HermesError):  # the client's own, e.g. an answer that is not HTTP
        return exc.message
    if isinstance(exc, socket.gaierror):
        return f"host not found: {host}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {address}"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return f"connection closed by {address} before it answered"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the TLS certificate of {host} is not trusted: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS with {address} failed: {exc.reason or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot connect to {address}: {exc.strerror}"
    return f"{exc} ({address})" if str(exc) else f"no answer from {address} ({type(exc).__name__})"


@dataclass(frozen=True)
class Verdict:
    retry: bool
    slow_down: bool


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

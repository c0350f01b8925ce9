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

Our extensions come before the table (``hermes.domain.retry_rules``), after a 2xx, a network error and the 401 of
an OAuth policy, which neither overrides: a failed answer with the stop-retry header, when the subscription
allows it, is given up at once; else the first of the subscription's status rules that matches the status decides
(RETRY: retried after the backoff, slowing down; RETRY_AFTER: retried after the rule's delay, which replaces a
Retry-After, not slowing down; DISCARD, DEAD_LETTER: given up at once). Giving up does not change whether the
answer slows the rate down.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from hermes.domain.retry_rules import NO_RULES, RETRIES_STOPPED, STOP_RETRY_HEADER, RetryRules, RuleAction
from hermes.errors import HermesError


@dataclass(frozen=True)
class SendResult:
    status: int | None = None  # HTTP status, None on a network error or timeout
    timed_out: bool = False
    error: str | None = None
    retry_after: float | None = None  # seconds, from a Retry-After header
    reauthorize: bool = False  # a 401 from an OAuth-secured subscriber: retried with a new token
    stop_retry: bool = False  # the answer carried the stop-retry header

    @classmethod
    def of_status(cls, status: int, retry_after: float | None = None, stop_retry: bool = False) -> SendResult:
        if retry_after is None and not stop_retry and 100 <= status < 600:  # the usual answer: one per status
            plain = _PLAIN.get(status)
            if plain is None:
                plain = _PLAIN[status] = cls(status=status)
            return plain
        return cls(status=status, retry_after=retry_after, stop_retry=stop_retry)

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


# The result of each plain status (without Retry-After or the stop-retry header), made once: a frozen dataclass's
# construction was 2 % of a delivery's CPU
_PLAIN: dict[int, SendResult] = {}


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
    delay: float | None = None  # seconds before the retry, a RETRY_AFTER rule's: replaces a Retry-After
    dead_letter: bool = True  # when given up: whether the message is kept as a dead letter
    why: str = ""  # the rule or header that decided, for the undelivered reason
    counter: str | None = None  # the metrics' count of what a rule or header decided


_DELIVERED = Verdict(retry=False, slow_down=False)
_RETRIED = Verdict(retry=True, slow_down=True)


def judge(result: SendResult, retry_client_errors: bool, rules: RetryRules = NO_RULES) -> Verdict:
    status = result.status
    if result.succeeded:
        return _DELIVERED
    if status is None:
        return _RETRIED
    if result.reauthorize:  # an expired token is no sign of overload
        return Verdict(retry=True, slow_down=False)
    verdict = _table(status, result.retry_after is not None, retry_client_errors)
    if result.stop_retry and rules.stop_retry_header_allowed:
        why = f"the subscriber answered {STOP_RETRY_HEADER}: stop"
        return Verdict(False, verdict.slow_down, why=why, counter=RETRIES_STOPPED)
    found = rules.rule_for(status) if rules.status_rules else None
    if found is None:
        return verdict
    index, rule = found
    why, counter = f"subscriptionPolicy.statusRules[{index}]: {rule.action}", rule.action.counter
    if rule.action is RuleAction.RETRY:
        return Verdict(True, True, why=why, counter=counter)
    if rule.action is RuleAction.RETRY_AFTER:
        return Verdict(True, False, (rule.delay or 0) / 1000, why=why, counter=counter)
    dead_letter = rule.action is RuleAction.DEAD_LETTER
    return Verdict(False, verdict.slow_down, dead_letter=dead_letter, why=why, counter=counter)


def _table(status: int, has_retry_after: bool, retry_client_errors: bool) -> Verdict:
    """Hermes' table for an answer that is not a 2xx."""
    if status == 429:
        if not retry_client_errors:
            return Verdict(retry=False, slow_down=True)
        return Verdict(retry=True, slow_down=not has_retry_after)
    if 400 <= status < 500:
        return Verdict(retry=retry_client_errors, slow_down=retry_client_errors)
    if status == 503:
        return Verdict(retry=True, slow_down=not has_retry_after)
    return _RETRIED  # 5xx, and anything else that is not 2xx

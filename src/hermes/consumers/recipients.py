"""Which resolved addresses one message goes to on each attempt, and what the attempt's results add up to.

ANYCAST: one address per attempt, the first resolved one; each retry moves on to the next (failover between
instances). BROADCAST: every resolved address that has not yet taken the message; the message is done when
all of them have, and retries go only to the instances that failed. An instance that is no longer resolved is
no longer waited for. A message an instance refused for good (a 4xx not retried, a status rule giving up) is
discarded once done: kept as a dead letter unless every instance that refused it did so by a DISCARD rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hermes.consumers.sender.result import SendResult, Verdict, judge
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.retry_rules import NO_RULES, RetryRules
from hermes.domain.subscription import SubscriptionMode


@dataclass(frozen=True)
class Outcome:
    """One attempt at a message over its addresses."""

    retry: bool
    slow_down: bool
    retry_after: float | None  # seconds: only when every failed instance asked for it
    reason: str  # why it failed, naming the failed instances when broadcasting
    rejected: bool = False  # done, but refused by a subscriber (4xx, not retried): discarded, as Hermes does
    dead_letter: bool = True  # when rejected: whether the message is kept as a dead letter
    status: int | None = None  # the status of a failed answer of this attempt (a rejecting one when rejected)
    counters: tuple[str, ...] = ()  # the metrics' counts of what rules and headers decided on this attempt


# The outcome of almost every attempt, made once (a frozen dataclass's construction costs a few calls)
_DELIVERED = Outcome(retry=False, slow_down=False, retry_after=None, reason="")


class Recipients:
    def __init__(self, mode: SubscriptionMode, earlier: int = 0) -> None:
        """``earlier``: attempts at the message before this delivery (a parked message's), ANYCAST only."""
        self._mode = mode
        self._done: set[str] = set()
        self._rejected: dict[str, tuple[SendResult, Verdict]] = {}  # instances that refused the message for good
        self._attempts: dict[str, int] = {}
        self._round = earlier

    def targets(self, addresses: list[str]) -> list[str]:
        """This attempt's addresses (none when the resolver gave none): the caller sends to each with its
        ``retries`` and hands the results to ``record``. (Sending is the caller's, so that an answer resumes one
        coroutine fewer.)"""
        self._round += 1
        if not addresses:
            return []
        if self._mode is SubscriptionMode.ANYCAST:
            return [addresses[(self._round - 1) % len(addresses)]]
        return [a for a in addresses if a not in self._done]

    def retries(self, address: str) -> int:
        """``Hermes-Retry-Count``: the message's earlier attempts (ANYCAST), or those at this instance."""
        return self._round - 1 if self._mode is SubscriptionMode.ANYCAST else self._attempts.get(address, 0)

    def unresolved(self, reason: str) -> Outcome:
        """The outcome of an attempt that found no address to send to: retried like a network error."""
        return Outcome(retry=True, slow_down=True, retry_after=None, reason=f"Message sending failed: {reason}")

    def record(
        self, results: Mapping[str, SendResult], retry_client_errors: bool, rules: RetryRules = NO_RULES
    ) -> Outcome:
        """The outcome of an attempt from each of its addresses' results."""
        failed: dict[str, tuple[SendResult, Verdict]] = {}
        slow_down = False
        counters: tuple[str, ...] = ()
        for address, result in results.items():
            self._attempts[address] = self._attempts.get(address, 0) + 1
            verdict = judge(result, retry_client_errors, rules)
            slow_down |= verdict.slow_down
            if verdict.counter is not None:
                counters += (verdict.counter,)
            if verdict.retry:
                failed[address] = (result, verdict)
            else:
                self._done.add(address)
                if not result.succeeded:
                    self._rejected[address] = (result, verdict)
        if not failed:
            if self._rejected:
                rejected = self._rejected.values()
                return Outcome(
                    False,
                    slow_down,
                    None,
                    self._reason(self._rejected),
                    rejected=True,
                    dead_letter=any(verdict.dead_letter for _, verdict in rejected),
                    status=next(iter(rejected))[0].status,
                    counters=counters,
                )
            if not slow_down and not counters:
                return _DELIVERED
            return Outcome(retry=False, slow_down=slow_down, retry_after=None, reason="", counters=counters)
        waits = [r.retry_after if v.delay is None else v.delay for r, v in failed.values()]
        retry_after = max(w for w in waits if w is not None) if None not in waits else None
        status = next(iter(failed.values()))[0].status
        return Outcome(True, slow_down, retry_after, self._reason(failed), status=status, counters=counters)

    def _reason(self, failed: Mapping[str, tuple[SendResult, Verdict]]) -> str:
        if self._mode is SubscriptionMode.ANYCAST:
            return _described(*next(iter(failed.values())))
        names = "; ".join(f"{EndpointAddress(a).masked} ({_described(r, v)})" for a, (r, v) in failed.items())
        return f"Message sending failed for instances: {names}"


def _described(result: SendResult, verdict: Verdict) -> str:
    return f"{result.description} ({verdict.why})" if verdict.why else result.description

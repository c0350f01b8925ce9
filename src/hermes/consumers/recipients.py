"""Which resolved addresses one message goes to on each attempt, and what the attempt's results add up to.

ANYCAST: one address per attempt, the first resolved one; each retry moves on to the next (failover between
instances). BROADCAST: every resolved address that has not yet taken the message; the message is done when
all of them have, and retries go only to the instances that failed. An instance that is no longer resolved is
no longer waited for. A message an instance refused for good (a 4xx not retried) is discarded once done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from hermes.consumers.sender.result import SendResult, judge
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.subscription import SubscriptionMode


@dataclass(frozen=True)
class Outcome:
    """One attempt at a message over its addresses."""

    retry: bool
    slow_down: bool
    retry_after: float | None  # seconds: only when every failed instance asked for it
    reason: str  # why it failed, naming the failed instances when broadcasting
    rejected: bool = False  # done, but refused by a subscriber (4xx, not retried): discarded, as Hermes does
    status: int | None = None  # the HTTP status of a failed attempt (None: none answered), for dead letters


Send = Callable[[str, int], Awaitable[SendResult]]  # (address, its retry count) -> result


class Recipients:
    def __init__(self, mode: SubscriptionMode) -> None:
        self._mode = mode
        self._done: set[str] = set()
        self._rejected: dict[str, SendResult] = {}  # instances that refused the message for good
        self._attempts: dict[str, int] = {}
        self._round = 0

    async def attempt(
        self, addresses: list[str], send: Send, retry_client_errors: bool
    ) -> tuple[Outcome, dict[str, SendResult]]:
        """Sends to this attempt's targets at once; the outcome and each address's result."""
        self._round += 1
        if not addresses:
            return self.unresolved("the endpoint address resolver returned no address"), {}
        if self._mode is SubscriptionMode.ANYCAST:
            targets = [addresses[(self._round - 1) % len(addresses)]]
        else:
            targets = [a for a in addresses if a not in self._done]
        if len(targets) == 1:  # the usual case: no task and gathering future per delivery
            sent = [await send(targets[0], self._retries(targets[0]))]
        else:
            sent = await asyncio.gather(*(send(a, self._retries(a)) for a in targets))
        results = dict(zip(targets, sent, strict=True))
        return self._record(results, retry_client_errors), results

    def _retries(self, address: str) -> int:
        """``Hermes-Retry-Count``: the message's earlier attempts (ANYCAST), or those at this instance."""
        return self._round - 1 if self._mode is SubscriptionMode.ANYCAST else self._attempts.get(address, 0)

    def unresolved(self, reason: str) -> Outcome:
        """The outcome of an attempt that found no address to send to: retried like a network error."""
        return Outcome(retry=True, slow_down=True, retry_after=None, reason=f"Message sending failed: {reason}")

    def _record(self, results: Mapping[str, SendResult], retry_client_errors: bool) -> Outcome:
        failed: dict[str, SendResult] = {}
        slow_down = False
        for address, result in results.items():
            self._attempts[address] = self._attempts.get(address, 0) + 1
            verdict = judge(result, retry_client_errors)
            slow_down |= verdict.slow_down
            if verdict.retry:
                failed[address] = result
            else:
                self._done.add(address)
                if not result.succeeded:
                    self._rejected[address] = result
        if not failed:
            if self._rejected:
                status = next(iter(self._rejected.values())).status
                return Outcome(False, slow_down, None, self._reason(self._rejected), rejected=True, status=status)
            return Outcome(retry=False, slow_down=slow_down, retry_after=None, reason="")
        waits = [r.retry_after for r in failed.values()]
        retry_after = max(w for w in waits if w is not None) if None not in waits else None
        return Outcome(True, slow_down, retry_after, self._reason(failed), status=next(iter(failed.values())).status)

    def _reason(self, failed: Mapping[str, SendResult]) -> str:
        if self._mode is SubscriptionMode.ANYCAST:
            return next(iter(failed.values())).description
        names = "; ".join(f"{EndpointAddress(a).masked} ({r.description})" for a, r in failed.items())
        return f"Message sending failed for instances: {names}"

"""Retrying a delivery until its messageTtl ends: the one loop of SERIAL and BATCH delivery, and its backoff.

Whether an attempt is retried, and whether it slows the sending rate down, is the subscribing guide's table in
``sender/result.py``; which addresses each attempt goes to is ``recipients.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hermes.consumers.delivery import Delivery, Send
from hermes.consumers.recipients import Recipients
from hermes.domain.message import Message
from hermes.domain.subscription import Subscription
from hermes.domain.trace import TraceStatus

# The undelivered reason of a message whose TTL ended before the rate limiter let its first attempt go.
HELD_BACK = "Message sending failed: messageTtl ended while the sending rate was limited"


@dataclass(frozen=True)
class Backoff:
    """``current = previous * multiplier``, from ``initial`` up to ``maximum`` (seconds)."""

    initial: float
    multiplier: float
    maximum: float

    @classmethod
    def of(cls, subscription: Subscription) -> Backoff:
        """The subscription's backoff; a BATCH one waits messageBackoff before every retry."""
        if subscription.is_batch:
            seconds = subscription.batch_policy.message_backoff / 1000
            return cls(seconds, 1.0, seconds)
        policy = subscription.serial_policy
        return cls(policy.message_backoff / 1000, policy.backoff_multiplier, policy.backoff_max_interval_in_sec)

    def delay(self, retries_so_far: int, retry_after: float | None = None) -> float:
        """The wait before the next attempt; a subscriber's Retry-After replaces the computed backoff."""
        if retry_after is not None:
            return retry_after
        try:
            grown = self.initial * self.multiplier**retries_so_far
        except OverflowError:  # a few hundred retries at a multiplier of 10: far beyond any maximum
            return self.maximum
        return min(grown, self.maximum)


async def retry_until_ttl(
    delivery: Delivery, messages: Sequence[Message], started: float, send: Send, *, paced: bool
) -> None:
    """Attempts to deliver ``messages`` (one message, or a batch sent as one request) until they are delivered,
    or discarded once their messageTtl, counted from ``started``, ends before the next attempt. Each attempt
    uses the subscription as it is then (an update may come while they wait). A ``paced`` delivery waits for
    the rate limiter before each attempt, within the TTL, and tells it how the attempt went. With tracing on,
    the delivery is a span, its attempts' spans within it."""
    tracing = delivery.context.tracing
    if tracing is None:
        discarded = await _attempts(delivery, messages, started, send, paced)
    else:
        ids, contexts = [m.message_id for m in messages], [m.propagated_headers for m in messages]
        with tracing.delivery(delivery.name, messages[0].topic, ids, contexts) as span:
            discarded = await _attempts(delivery, messages, started, send, paced)
            tracing.delivered(span, None if discarded is None else discarded[0])
    if discarded is None:
        delivery.delivered(messages)
    else:
        reason, last_status, attempts = discarded
        await delivery.discard(messages, reason, last_status=last_status, attempts=attempts)


async def _attempts(
    delivery: Delivery, messages: Sequence[Message], started: float, send: Send, paced: bool
) -> tuple[str, int | None, int] | None:
    """None once ``messages`` are delivered; else why they are discarded, the last status and the attempts."""
    recipients = Recipients(delivery.subscription.mode)
    reason = HELD_BACK  # why the messages are not delivered yet
    status: int | None = None
    retries = attempts = 0
    while not paced or await delivery.slot(delivery.ttl_left(started)):
        subscription = delivery.subscription
        outcome = await delivery.attempt(subscription, recipients, send)
        attempts += 1
        if paced:
            delivery.rate.record(failed=outcome.slow_down)
        if not outcome.retry:
            return (outcome.reason, outcome.status, attempts) if outcome.rejected else None
        reason, status = outcome.reason, outcome.status
        backoff = Backoff.of(subscription).delay(retries, outcome.retry_after)
        if backoff > delivery.ttl_left(started):
            break
        delivery.traces(messages, TraceStatus.FAILED, reason)
        retries += 1
        await delivery.pause(backoff)
    return reason, status, attempts

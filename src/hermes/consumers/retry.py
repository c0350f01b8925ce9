"""Retrying a delivery until its messageTtl ends: the one loop of SERIAL and BATCH delivery, and its backoff.

Whether an attempt is retried, and whether it slows the sending rate down, is the subscribing guide's table in
``sender/result.py`` with the subscription's status rules; which addresses each attempt goes to is
``recipients.py``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from hermes.consumers.delivery import Delivery, Send
from hermes.consumers.recipients import Recipients
from hermes.domain.message import Message
from hermes.domain.retry_rules import BackoffJitter
from hermes.domain.subscription import Subscription
from hermes.domain.trace import TraceStatus

# The undelivered reason of a message whose TTL ended before the rate limiter or the circuit breaker let its first
# attempt go.
HELD_BACK = "Message sending failed: messageTtl ended while the sending rate was limited or the circuit breaker open"


class _Parked(Enum):
    """A delivery that ended with its message parked in the retry topic (``parking.py``)."""

    PARKED = "parked"


@dataclass(frozen=True)
class Backoff:
    """``current = previous * multiplier``, from ``initial`` up to ``maximum`` (seconds), then jittered."""

    initial: float
    multiplier: float
    maximum: float
    jitter: BackoffJitter = BackoffJitter.NONE

    @classmethod
    def of(cls, subscription: Subscription) -> Backoff:
        """The subscription's backoff; a BATCH one waits messageBackoff before every retry."""
        jitter = subscription.retry_rules.backoff_jitter
        if subscription.is_batch:
            seconds = subscription.batch_policy.message_backoff / 1000
            return cls(seconds, 1.0, seconds, jitter)
        policy = subscription.serial_policy
        return cls(policy.message_backoff / 1000, policy.backoff_multiplier, policy.backoff_max_interval_in_sec, jitter)

    def delay(self, retries_so_far: int, retry_after: float | None = None) -> float:
        """The wait before the next attempt; a Retry-After (the subscriber's, or a rule's delay) replaces the
        computed backoff and is not jittered: it says when."""
        if retry_after is not None:
            return retry_after
        try:
            backoff = min(self.initial * self.multiplier**retries_so_far, self.maximum)
        except OverflowError:  # a few hundred retries at a multiplier of 10: far beyond any maximum
            backoff = self.maximum
        if self.jitter is BackoffJitter.FULL:
            return random.uniform(0, backoff)
        if self.jitter is BackoffJitter.EQUAL:
            return backoff / 2 + random.uniform(0, backoff / 2)
        return backoff


@dataclass(frozen=True)
class GiveUp:
    """Why messages are not delivered, and what the dead letters they become keep of it."""

    reason: str
    last_status: int | None = None  # the last failed answer's status; None after a network error or none
    attempts: int = 0
    dead_letter: bool = True  # False: a DISCARD status rule said the messages are worthless


_HELD_BACK = GiveUp(HELD_BACK)


async def retry_until_ttl(
    delivery: Delivery, messages: Sequence[Message], started: float, send: Send, *, paced: bool, attempts: int = 0
) -> None:
    """Attempts to deliver ``messages`` (one message, or a batch sent as one request) until they are delivered,
    or discarded once their messageTtl, counted from ``started``, ends before the next attempt. Each attempt
    uses the subscription as it is then (an update may come while they wait). A ``paced`` delivery waits for
    the rate limiter before each attempt, within the TTL, and tells it how the attempt went. With tracing on,
    the delivery is a span, its attempts' spans within it. ``attempts``: those made before (a parked message's).
    A message may end parked: then it is neither delivered nor discarded yet."""
    tracing = delivery.context.tracing
    if tracing is None:
        given_up = await _attempts(delivery, messages, started, send, paced, attempts)
    else:
        ids, contexts = [m.message_id for m in messages], [m.propagated_headers for m in messages]
        with tracing.delivery(delivery.name, messages[0].topic, ids, contexts) as span:
            given_up = await _attempts(delivery, messages, started, send, paced, attempts)
            if given_up is not _Parked.PARKED:
                tracing.delivered(span, None if given_up is None else given_up.reason)
    if given_up is _Parked.PARKED:
        delivery.metrics.count("parked")
    elif given_up is None:
        delivery.delivered(messages)
    else:
        await delivery.discard(
            messages,
            given_up.reason,
            last_status=given_up.last_status,
            attempts=given_up.attempts,
            dead_letter=given_up.dead_letter,
        )


async def _attempts(
    delivery: Delivery, messages: Sequence[Message], started: float, send: Send, paced: bool, attempts: int
) -> GiveUp | _Parked | None:
    """None once ``messages`` are delivered; PARKED once parked; else why they are discarded. ``attempts``: those
    made before (a parked message's)."""
    recipients = Recipients(delivery.subscription.mode, attempts)
    given_up = _HELD_BACK  # why the messages are not delivered yet
    while delivery.admitted_at_once(paced) or await delivery.admitted(started, paced):
        subscription = delivery.subscription
        outcome = await delivery.attempt(subscription, recipients, send)
        attempts += 1
        if paced:
            delivery.rate.record(failed=outcome.slow_down)
        for counter in outcome.counters:
            delivery.metrics.count(counter, len(messages))
        if not outcome.retry:
            if not outcome.rejected:
                return None
            return GiveUp(outcome.reason, outcome.status, attempts, outcome.dead_letter)
        given_up = GiveUp(outcome.reason, outcome.status, attempts)
        backoff = Backoff.of(subscription).delay(attempts - 1, outcome.retry_after)
        if backoff > delivery.ttl_left(started):
            break
        delivery.traces(messages, TraceStatus.FAILED, outcome.reason)
        parking = delivery.context.parking
        if parking is not None and await parking.park(subscription, messages, backoff, attempts, started):
            return _Parked.PARKED
        await delivery.pause(backoff)
    return given_up

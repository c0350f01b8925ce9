"""One subscription's delivery, shared by its SERIAL or BATCH consumer: the subscription as it is now (an update
reaches the next attempt of every message in flight), its filters, the rate limiter, attempts over the resolved
addresses, metrics, the failure log, tracing and discards."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from hermes.consumers.breaker import BreakerState, CircuitBreaker
from hermes.consumers.context import ConsumerContext
from hermes.consumers.failure_log import FailureLog, describe
from hermes.consumers.rate import AdaptiveRateLimiter, RateMode
from hermes.consumers.recipients import Outcome, Recipients
from hermes.consumers.resolver import EndpointItself
from hermes.consumers.sender.result import SendResult
from hermes.consumers.subscription_metrics import SubscriptionMetrics
from hermes.domain.filters import MessageFilters
from hermes.domain.message import Message
from hermes.domain.subscription import Subscription, TrackingMode
from hermes.domain.trace import TraceStatus
from hermes.errors import EndpointResolutionError, HermesError
from hermes.metadata.documents import UNDELIVERED_LAST, UndeliveredMessage
from hermes.tracker import Tracker

log = logging.getLogger(__name__)

T = TypeVar("T")

# One request: (the subscription as it is at the attempt, an address, that address's retry count) -> result
Send = Callable[[Subscription, str, int], Awaitable[SendResult]]


def _destination(subscription: Subscription) -> tuple[object, ...]:
    """Where the subscription's messages go: a change makes it another subscriber."""
    return subscription.endpoint, subscription.endpoint_address_resolver_metadata


class Delivery:
    def __init__(self, subscription: Subscription, context: ConsumerContext) -> None:
        self.subscription = subscription
        self.context = context
        self._filters = MessageFilters(subscription.filters)
        self.rate = AdaptiveRateLimiter(subscription.serial_policy.rate, context.rate)
        self._rate_share: float | None = None  # this node's share of the rate in a cluster (hermes.cluster)
        self.metrics = SubscriptionMetrics(subscription.topic_name.qualified, subscription.name)
        self.failures = FailureLog(self.name, context.failure_log_interval)
        self._redirected = asyncio.Event()  # set (and replaced) when the endpoint changes
        self._waiting: set[asyncio.Task[Any]] = set()  # deliveries waiting for a retry or a rate slot
        self.breaker = CircuitBreaker(subscription.circuit_breaker, self._breaker_changed)
        self._stopped = False  # no attempt starts any more (the consumer stops)

    @property
    def name(self) -> str:
        return self.subscription.qualified_name.qualified

    def update(self, subscription: Subscription) -> None:
        """Takes a changed subscription (endpoint, policy, filters, headers...) for every following attempt,
        those of messages in flight included. A new endpoint is a new subscriber: the retries waiting for the
        old one (their backoff, the rate limiter's slow or heartbeat slots) go at once."""
        redirected = _destination(subscription) != _destination(self.subscription)
        self.subscription = subscription
        self._filters = MessageFilters(subscription.filters)
        self.rate.set_max_rate(self._max_rate())
        self.breaker.set_policy(subscription.circuit_breaker)
        if redirected:
            self._redirected.set()
            self._redirected = asyncio.Event()
            self.rate.reset()
            self.breaker.reset("the endpoint changed")

    def set_rate_share(self, share: float | None) -> None:
        """This node's share of the subscription's rate, which the nodes delivering it split (None: all of it)."""
        if share != self._rate_share:
            self._rate_share = share
            self.rate.set_max_rate(self._max_rate())

    def _max_rate(self) -> float:
        rate = float(self.subscription.serial_policy.rate)
        return rate if self._rate_share is None else min(rate, self._rate_share)

    @property
    def failing(self) -> bool:
        """The rate limiter has slowed down: the subscriber fails."""
        return self.rate.mode is not RateMode.NORMAL

    def ttl_left(self, started: float) -> float:
        """Seconds left of the messageTtl (as the subscription says now) of a delivery begun at ``started``."""
        return started + self.subscription.message_ttl_seconds - time.monotonic()

    async def schema(self, message: Message) -> str | None:
        """The Avro schema of an Avro message; None for JSON, or when it cannot be read."""
        try:
            return await self.context.content.schema(message)
        except Exception:
            log.warning("no schema version %s for %s", message.schema_version, message.topic, exc_info=True)
            return None

    async def resolve(self, message: Message, wait: bool = True) -> Message | None:
        """The message itself, or an offloaded one with its stored body (``stored``: closed by ``finished``) in
        place of its placeholder; None when that cannot be had (the message is then discarded, with the reason in
        the last undelivered message). Without ``wait``, the message comes back unresolved when the body budget
        has no room for it."""
        if message.external_url is None:
            return message
        try:
            resolved = await self.context.offloaded.resolve(message, wait)
        except HermesError as exc:
            await self.discard([message], exc.message)
            return None
        return message if resolved is None else resolved

    @staticmethod
    def finished(messages: Iterable[Message]) -> None:
        """Lets go of the stored bodies of finished messages (their files, their share of the body budget)."""
        for message in messages:
            if message.stored is not None:
                message.stored.close()

    def plain(self, messages: list[Message]) -> bool:
        """Whether ``messages`` go as they are: JSON held in Kafka (neither Avro, offloaded nor CloudEvents, which go
        in their JSON format), and no filter."""
        return not self._filters and not any(
            message.external_url is not None or message.schema_version is not None or message.cloud_event is not None
            for message in messages
        )

    @property
    def filtered(self) -> bool:
        """Whether the subscription has filters (without, ``passes`` need not be awaited)."""
        return bool(self._filters)

    async def passes(self, message: Message, schema: str | None) -> bool:
        """Whether the message passes the filters (Avro ones read as records); one that does not is counted."""
        if not self._filters:
            return True
        filters, content = self._filters, self.context.content
        if message.stored is None:
            passed = filters.passes(message, lambda m: content.document(m, schema))
        else:  # a stored body is read and parsed whole: in a thread, so other subscriptions' deliveries go on
            passed = await asyncio.to_thread(filters.passes, message, lambda m: content.document(m, schema))
        if not passed:
            self.metrics.count("filtered")
        return passed

    def admitted_at_once(self, paced: bool) -> bool:
        """``admitted`` when it need not wait: the breaker closed and (``paced``) a slot free now. When False,
        ``admitted`` decides (the usual attempt thus takes no coroutine and no TTL reckoning for it)."""
        return self.breaker.closed and (not paced or self.rate.try_acquire())

    async def admitted(self, started: float, paced: bool) -> bool:
        """Waits for the circuit breaker, then (``paced``) for a sending slot; False when the TTL of a delivery begun
        at ``started`` ends first. A probe of an open breaker needs no slot: the breaker's interval paces it."""
        if self.breaker.admit() is None:
            probe = not self.breaker.closed  # granted at once
        else:
            try:
                async with asyncio.timeout(max(self.ttl_left(started), 0.0)):
                    probe = await self._wait(self.breaker.wait())
            except TimeoutError:
                return False
        return probe or not paced or await self.slot(self.ttl_left(started))

    def _breaker_changed(self, state: BreakerState, previous: BreakerState, reason: str) -> None:
        log.log(
            logging.INFO if state is BreakerState.HALF_OPEN else logging.WARNING,
            "circuit breaker of %s: %s -> %s (%s)",
            self.name,
            previous.value,
            state.value,
            reason,
        )
        if self.context.events is not None:
            self.context.events.publish(self.subscription, state.value, previous.value, reason)

    async def slot(self, within: float) -> bool:
        """Waits for a sending slot; False when ``within`` seconds (the message's TTL) end first."""
        if self.rate.try_acquire():
            return True
        try:
            async with asyncio.timeout(max(within, 0.0)):
                await self._wait(self.rate.acquire())
        except TimeoutError:
            return False
        return True

    async def pause(self, seconds: float) -> None:
        """Sleeps before a retry; less when the endpoint changes, since the wait was for the old one."""
        redirected = self._redirected
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wait(redirected.wait())

    def stop(self) -> None:
        """No attempt starts any more, also while deliveries being sent get a moment to finish (Hermes issue
        #1645): the deliveries waiting for a retry or a rate slot are cancelled, now or when they come to wait.
        They stay unfinished, so their messages come again."""
        self._stopped = True
        for task in list(self._waiting):
            task.cancel()

    async def _backoff(self, seconds: float) -> None:
        """A wait before a dead letter is written again: a stop need not wait for it (the message comes again)."""
        await self._wait(asyncio.sleep(seconds))

    def waiting(self, task: asyncio.Task[Any]) -> bool:
        """Whether the delivery ``task`` waits for a retry or a rate slot (rather than sending)."""
        return task in self._waiting

    async def _wait(self, waiting: Awaitable[T]) -> T:
        task = asyncio.current_task()
        assert task is not None
        if self._stopped:
            if asyncio.iscoroutine(waiting):
                waiting.close()  # never awaited
            raise asyncio.CancelledError
        self._waiting.add(task)
        try:
            return await waiting
        finally:
            self._waiting.discard(task)

    async def attempt(self, subscription: Subscription, recipients: Recipients, send: Send) -> Outcome:
        """Sends once to this attempt's addresses, counting each request's result in the metrics and, when the
        attempt failed, in the failure log."""
        policy = subscription.batch_policy if subscription.is_batch else subscription.serial_policy
        results: dict[str, SendResult] = {}
        resolver = self.context.resolver
        try:
            if type(resolver) is EndpointItself:  # the default's one address, without a coroutine to await
                addresses = [subscription.endpoint.url]
            else:
                metadata = subscription.endpoint_address_resolver_metadata
                addresses = await resolver.resolve(subscription.endpoint, metadata)
        except EndpointResolutionError as exc:
            outcome = recipients.unresolved(exc.message)
        else:
            targets = recipients.targets(addresses)
            if not addresses:
                outcome = recipients.unresolved("the endpoint address resolver returned no address")
            else:
                if len(targets) == 1:  # the usual case: no task and gathering future per delivery
                    address = targets[0]
                    results[address] = await send(subscription, address, recipients.retries(address))
                elif targets:
                    sent = await asyncio.gather(*(send(subscription, a, recipients.retries(a)) for a in targets))
                    results = dict(zip(targets, sent, strict=True))
                outcome = recipients.record(results, policy.retry_client_errors, subscription.retry_rules)
        for url, result in results.items():
            self.metrics.response(result.status, result.timed_out)
            if not result.succeeded:
                self.failures.failed(describe(result, url))
        if outcome.retry and not results:  # no address to send to
            self.failures.failed(outcome.reason)
        self.breaker.record(failed=outcome.retry or outcome.slow_down)
        return outcome

    def delivered(self, messages: Sequence[Message]) -> None:
        self.metrics.count("delivered", len(messages))
        self.traces(messages, TraceStatus.SUCCESS)

    async def discard(
        self,
        messages: Sequence[Message],
        reason: str,
        *,
        last_status: int | None = None,
        attempts: int = 0,
        dead_letter: bool = True,
    ) -> None:
        """Gives up on ``messages``: with the dead-letter policy on (and ``dead_letter``), written to the
        subscription's dead-letter topic first (returns once the broker has them: only then may their offsets be
        committed); counted, traced, summed up in the failure log and recorded as the last undelivered message."""
        dead_letters = self.context.dead_letters
        if dead_letter and self.subscription.dead_letters.enabled and dead_letters is not None:
            await dead_letters.write(self.subscription, messages, reason, last_status, attempts, self._backoff)
            self.metrics.count("deadLettered", len(messages))
        self.failures.discarded(len(messages), reason)
        for message in messages:
            self.metrics.count("discarded")
            self.trace(message, TraceStatus.DISCARDED, reason)
            record = UndeliveredMessage(
                timestamp=int(time.time() * 1000),
                subscription=self.subscription.name,
                topicName=self.subscription.topic_name.qualified,
                status="DISCARDED",
                reason=reason,
                message=message.body.decode("utf-8", "replace"),
                partition=message.partition,
                offset=message.offset,
                cluster=self.context.cluster,
            )
            try:
                await asyncio.to_thread(
                    self.context.repository.put_document, UNDELIVERED_LAST, self.name, record.to_document()
                )
            except Exception:
                log.warning("recording the undelivered message of %s failed", self.name, exc_info=True)

    def traces(self, messages: Iterable[Message], status: TraceStatus, reason: str | None = None) -> None:
        if self._tracker(status) is not None:
            for message in messages:
                self.trace(message, status, reason)

    def _tracker(self, status: TraceStatus) -> Tracker | None:
        """The tracker, if the subscription's tracking records ``status``."""
        tracker = self.context.tracker
        if tracker is None or not self.subscription.tracking_enabled:
            return None
        if status is not TraceStatus.DISCARDED and self.subscription.tracking_mode is TrackingMode.DISCARDED_ONLY:
            return None
        return tracker

    def trace(self, message: Message, status: TraceStatus, reason: str | None = None) -> None:
        tracker = self._tracker(status)
        if tracker is None:
            return
        tracker.consumer(
            message.message_id,
            message.topic,
            self.subscription.name,
            status,
            message.partition,
            message.offset,
            reason,
            message.publish_timestamp,
        )

"""One subscription's consumer on this node, as the supervisor runs it (Hermes' ``ConsumerProcess``): a receiver
reading the topic, SERIAL or BATCH delivery using it, and what both need around them: start and stop, subscription
updates, retransmission requests, dead-letter redrives and the periodic metrics snapshot.

An unexpected exception in the Kafka thread, a delivery or the batching is a crash: it is reported once through
``on_crash`` (the supervisor then restarts the consumer). Crashed deliveries stay unfinished, so their messages
come again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from hermes.consumers.batch import BatchConsumer
from hermes.consumers.context import ConsumerContext, CrashListener
from hermes.consumers.delivery import Delivery
from hermes.consumers.rate import AdaptiveRateLimiter
from hermes.consumers.receiver import MessageReceiver, Receiver
from hermes.consumers.redrive import Redrives
from hermes.consumers.retransmission import RetransmissionRequests
from hermes.consumers.serial import SerialConsumer
from hermes.consumers.shared_reading import SharedReader
from hermes.consumers.subscription_metrics import SubscriptionMetrics
from hermes.domain.subscription import Subscription, SubscriptionState
from hermes.errors import HermesError
from hermes.metadata.documents import SUBSCRIPTION_METRICS
from hermes.metadata.repository import until_reachable

log = logging.getLogger(__name__)

# Seconds between writes of an unchanged metrics snapshot: well within the 30 s after which management takes a
# node's snapshot for stale.
_UNCHANGED_REPORT_INTERVAL = 10.0


class ConsumerProcess:
    def __init__(
        self,
        subscription: Subscription,
        context: ConsumerContext,
        on_crash: CrashListener | None = None,
        reader: SharedReader | None = None,
    ) -> None:
        self._context = context
        self._on_crash = on_crash
        self.crash: BaseException | None = None
        self._stopping = False
        self.delivery = Delivery(subscription, context)
        # the process's shared reader when it runs every partition (one node); in a cluster, the group shares them
        self.receiver: Receiver = (reader.receiver if reader is not None else MessageReceiver)(
            self.name, subscription.topic_name.qualified, subscription.consumer_group_id, context, self._crashed
        )
        self.consumer: SerialConsumer | BatchConsumer = (BatchConsumer if subscription.is_batch else SerialConsumer)(
            self.delivery, self.receiver, self._crashed
        )
        self._retransmissions = RetransmissionRequests(context.repository, subscription.topic_name.qualified, self.name)
        self._suspending: asyncio.Task[None] | None = None  # the breaker's suspendAfter, under way
        self.redrives = Redrives(self.delivery, self.consumer.redeliver)
        self._reported: tuple[object, ...] = ()  # what the last report's gauges came from (see _at_rest)

    @property
    def name(self) -> str:
        return self.subscription.qualified_name.qualified

    @property
    def subscription(self) -> Subscription:
        return self.delivery.subscription

    @property
    def rate(self) -> AdaptiveRateLimiter:
        return self.delivery.rate

    @property
    def metrics(self) -> SubscriptionMetrics:
        return self.delivery.metrics

    async def start(self) -> None:
        snapshot = await until_reachable(self._context.repository.get_document, SUBSCRIPTION_METRICS, self.snapshot_key)
        self.metrics.restore(snapshot)
        self.receiver.starting_after(await self._retransmissions.start())
        self.consumer.start()
        if self._context.parking is not None and isinstance(self.consumer, SerialConsumer):
            await self._context.parking.open(self.subscription, self.consumer.unpark, self.metrics)
        self.redrives.start()

    def update(self, subscription: Subscription) -> None:
        self.delivery.update(subscription)
        if self._context.parking is not None:
            self._context.parking.update(subscription)

    async def retransmission_requested(self) -> None:
        """The subscription's retransmission request changed: a new one moves the group to its offsets."""
        if not self._stopping and (request := await self._retransmissions.new_request()) is not None:
            self.receiver.seek(request)

    async def stop(self, drain_timeout: float = 5.0) -> None:
        """Stops reading and retrying, lets deliveries that are sending finish for a moment, commits what is done
        and closes."""
        self._stopping = True
        self.delivery.stop()
        self.receiver.stop_reading()
        if self._context.parking is not None:
            await self._context.parking.close(self.subscription)
        await self.redrives.stop()
        await self.consumer.stop(drain_timeout)
        await self.receiver.close()
        await self._publish_metrics()

    def _crashed(self, error: BaseException) -> None:
        """Reports the first crash (none once stopping: the stop's own cancellations are not crashes)."""
        if self.crash is not None or self._stopping:
            return
        self.crash = error
        if self._on_crash is not None:
            self._on_crash(error)

    @property
    def snapshot_key(self) -> str:
        """Its metrics snapshot's key: one per subscription and node."""
        return f"{self.name}/{self._context.node_id}"

    def report(self, changed_only: bool = False) -> dict[str, Any] | None:
        """Sums up the failures of the interval and takes the metrics snapshot to write (the supervisor writes all
        of them at once); with ``changed_only``, None for an unchanged one (an idle subscription's) except every
        ``_UNCHANGED_REPORT_INTERVAL``: a write a second per idle subscription was most of what a thousand of them
        cost."""
        if changed_only and self._at_rest():
            return None
        sources = self._gauge_sources()  # before the gauges: a read meanwhile is seen at the next report
        self.delivery.failures.flush()
        self.metrics.gauges(self.receiver.unfinished(), self.rate.rate, self.rate.mode.value, self.receiver.lag)
        self._report_breaker()
        self._reported = sources
        if changed_only and self.metrics.unchanged(_UNCHANGED_REPORT_INTERVAL):
            return None
        return self.metrics.snapshot()

    def _gauge_sources(self) -> tuple[object, ...]:
        rate, breaker = self.rate, self.delivery.breaker
        return self.receiver.changes, self.receiver.lag, rate.rate, rate.mode, breaker.state, breaker.opened

    def _at_rest(self) -> bool:
        """Whether nothing a report looks at moved since the last one, told without computing the gauges (a
        thousand idle subscriptions' reports were half of what they cost): no message read nor finished, the same
        lag, rate and breaker (closed), no failure to log, and the snapshot neither due nor with anything new."""
        return (
            self._reported == self._gauge_sources()
            and self.delivery.breaker.closed
            and not self.delivery.failures.pending
            and self.metrics.at_rest(_UNCHANGED_REPORT_INTERVAL)
        )

    def _report_breaker(self) -> None:
        breaker = self.delivery.breaker
        if breaker.suspension_due() and self._suspending is None and not self._stopping:
            self._suspending = asyncio.create_task(self._suspend(), name=f"suspend-{self.name}")
        if breaker.policy is None and not breaker.opened:
            return
        if breaker.closed:
            self.metrics.circuit_breaker(breaker.state.value, breaker.opened, 0, breaker.reason)
        else:
            self.metrics.circuit_breaker(breaker.state.value, breaker.opened, breaker.since_ms, breaker.opened_because)

    async def _suspend(self) -> None:
        """Suspends the subscription as management's ``PUT .../state`` does (its consumers then stop, here and on
        every node), and announces it."""
        breaker, subscription = self.delivery.breaker, self.subscription
        assert breaker.policy is not None and breaker.policy.suspend_after is not None
        reason = f"the circuit breaker stayed open for {breaker.policy.suspend_after} ms ({breaker.opened_because})"

        def suspended(current: Subscription) -> Subscription:
            return dataclasses.replace(current, state=SubscriptionState.SUSPENDED)

        try:
            await asyncio.to_thread(
                self._context.repository.update_subscription, subscription.topic_name, subscription.name, suspended
            )
        except HermesError as exc:  # deleted meanwhile, or the store unreachable
            log.warning("could not suspend %s (tried again in a moment): %s", self.name, exc.message)
            self._suspending = None
            return
        log.warning("suspended %s: %s", self.name, reason)
        if self._context.events is not None:
            self._context.events.publish(subscription, SubscriptionState.SUSPENDED.value, breaker.state.value, reason)

    async def _publish_metrics(self) -> None:
        """The last snapshot, marked ``stopped``: its totals count on, but this node no longer serves it."""
        snapshot = self.report()
        assert snapshot is not None
        snapshot["stopped"] = True
        async with self._context.metrics_writes:
            await asyncio.to_thread(
                self._context.repository.put_document, SUBSCRIPTION_METRICS, self.snapshot_key, snapshot
            )

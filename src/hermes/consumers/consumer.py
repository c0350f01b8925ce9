"""One subscription's SERIAL consumer: reads its topic in the subscription's consumer group and pushes each
message to the endpoint, committing only offsets below every message still in flight.

The Kafka consumer lives on its own thread (librdkafka calls block); sending runs on the asyncio loop.
A retransmission moves the group to new offsets: it starts a new *generation*; deliveries of the old one are
cancelled and can no longer touch the offset tracker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hermes.broker.connection import KafkaConnection
from hermes.broker.consumer import BrokerConsumer
from hermes.consumers.content import ContentConverter
from hermes.consumers.filtering import MessageFilters
from hermes.consumers.metrics import SNAPSHOT_NAMESPACE, UNDELIVERED_NAMESPACE, SubscriptionMetrics, UndeliveredMessage
from hermes.consumers.offsets import OffsetTracker, Partition
from hermes.consumers.rate import AdaptiveRateLimiter, RateSettings
from hermes.consumers.retry import Backoff, judge
from hermes.consumers.sender.http import HttpSender
from hermes.consumers.sender.result import SendResult
from hermes.domain.message import Message
from hermes.domain.subscription import Subscription
from hermes.metadata.repository import MetadataRepository
from hermes.tracking import TraceStatus, Tracker

log = logging.getLogger(__name__)

RETRANSMISSION_NAMESPACE = "retransmission"
# Seconds a consumer may sit at its in-flight limit before its partitions are paused (see _run).
_PAUSE_AFTER = 10.0


@dataclass(frozen=True)
class ConsumerContext:
    """What every consumer of a process shares."""

    connection: KafkaConnection
    sender: HttpSender
    repository: MetadataRepository
    content: ContentConverter
    node_id: str
    cluster: str
    tracker: Tracker | None = None
    commit_interval: float = 1.0
    metrics_interval: float = 1.0
    session_timeout_ms: int = 6000
    fetch_wait_max_ms: int = 10
    rate: RateSettings = field(default_factory=RateSettings)


class SerialConsumer:
    def __init__(self, subscription: Subscription, context: ConsumerContext) -> None:
        self.subscription = subscription
        self._context = context
        self._tracker = OffsetTracker()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: dict[asyncio.Task[None], int] = {}
        self._generation = 0
        self._seek_to: dict[Partition, int] | None = None
        self._retransmission_seen: int | None = None
        self._filters = MessageFilters(subscription.filters)
        self.rate = AdaptiveRateLimiter(subscription.serial_policy.rate, context.rate)
        self.metrics = SubscriptionMetrics(subscription.topic_name.qualified, subscription.name)
        self._reporter: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.subscription.qualified_name.qualified

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        repository = self._context.repository
        snapshot = await asyncio.to_thread(repository.get_document, SNAPSHOT_NAMESPACE, self._snapshot_key)
        self.metrics.restore(snapshot)
        request = await asyncio.to_thread(repository.get_document, RETRANSMISSION_NAMESPACE, self.name)
        self._retransmission_seen = request.get("requestedAt") if request else None
        self._thread = threading.Thread(target=self._run, name=f"consumer-{self.name}", daemon=True)
        self._thread.start()
        self._reporter = asyncio.create_task(self._report(), name=f"metrics-{self.name}")

    def update(self, subscription: Subscription) -> None:
        """Takes a changed subscription (endpoint, policy, filters, headers...) for every following attempt."""
        self.subscription = subscription
        self._filters = MessageFilters(subscription.filters)
        self.rate.set_max_rate(subscription.serial_policy.rate)

    async def stop(self, drain_timeout: float = 5.0) -> None:
        """Stops reading, lets in-flight deliveries finish for a moment, commits what is done and closes.
        Deliveries cut short stay unfinished: their messages come again after a restart."""
        self._stopping.set()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=drain_timeout)
        for task in list(self._tasks):
            task.cancel()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        if self._reporter is not None:
            self._reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reporter
        await self._publish_metrics()

    def _capacity(self) -> int:
        """How many read messages may be unfinished before reading pauses."""
        return self.subscription.serial_policy.inflight_size

    @property
    def _snapshot_key(self) -> str:
        return f"{self.name}/{self._context.node_id}"

    # --- the Kafka thread ---

    def _run(self) -> None:
        consumer = BrokerConsumer(
            self._context.connection,
            self.subscription.consumer_group_id,
            session_timeout_ms=self._context.session_timeout_ms,
            fetch_wait_max_ms=self._context.fetch_wait_max_ms,
            on_revoke=lambda partitions: self._commit(consumer, only=partitions, forget=True),
        )
        try:
            consumer.subscribe([self.subscription.topic_name.qualified])
            paused = False
            full_since: float | None = None
            last_commit = time.monotonic()
            while not self._stopping.is_set():
                if self._seek_to is not None:
                    self._apply_seek(consumer)
                with self._lock:
                    full = self._tracker.inflight() >= self._capacity()
                    generation = self._generation
                # A full in-flight budget first just stops taking messages: librdkafka keeps prefetching into
                # its bounded queue. Pausing would drop that queue (a resume fetches from scratch, which cut
                # throughput tenfold), so partitions are paused only in a long stall, to keep polling (and with
                # it the group membership) going while nothing can be taken.
                now = time.monotonic()
                full_since = (full_since or now) if full else None
                stalled = full_since is not None and now - full_since > _PAUSE_AFTER
                if stalled != paused:
                    (consumer.pause if stalled else consumer.resume)(consumer.assignment())
                    paused = stalled
                if full and not paused:
                    messages = []
                    time.sleep(0.002)
                else:
                    messages = consumer.poll(max_messages=100, timeout=0.05 if paused else 0.1)
                if messages:
                    with self._lock:
                        if generation != self._generation:
                            continue  # read before a retransmission moved the group: dropped
                        for message in messages:
                            self._tracker.read((message.topic, message.partition), message.offset)
                    assert self._loop is not None
                    self._loop.call_soon_threadsafe(self._dispatch, messages, generation)
                if time.monotonic() - last_commit >= self._context.commit_interval:
                    self._commit(consumer)
                    last_commit = time.monotonic()
            self._commit(consumer)
        except Exception:
            log.exception("consumer of %s failed", self.name)
        finally:
            consumer.close()

    def _apply_seek(self, consumer: BrokerConsumer) -> None:
        offsets, self._seek_to = self._seek_to or {}, None
        with self._lock:
            self._generation += 1
            self._tracker.forget(list(self._tracker.partitions()))
        assigned = set(consumer.assignment())
        for (topic, partition), offset in offsets.items():
            if (topic, partition) in assigned:
                consumer.seek(topic, partition, offset)
        try:
            consumer.commit(offsets)  # a crash right after still restarts from the retransmission date
        except Exception:
            log.warning("committing retransmission offsets of %s failed", self.name, exc_info=True)
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._cancel_older_than, self._generation)
        log.info("retransmission of %s from %s", self.name, offsets)

    def _commit(self, consumer: BrokerConsumer, only: list[Partition] | None = None, forget: bool = False) -> None:
        with self._lock:
            offsets = self._tracker.committable()
            if only is not None:
                offsets = {p: o for p, o in offsets.items() if p in only}
        try:
            consumer.commit(offsets)
        except Exception:
            log.warning("committing offsets of %s failed; will retry", self.name, exc_info=True)
            return
        with self._lock:
            self._tracker.mark_committed(offsets)
            if forget and only is not None:
                self._tracker.forget(only)

    # --- the asyncio side ---

    def _dispatch(self, messages: list[Message], generation: int) -> None:
        if generation != self._generation:
            return
        for message in messages:
            task = asyncio.create_task(self._deliver(message, generation))
            self._tasks[task] = generation
            task.add_done_callback(self._tasks.pop)

    def _cancel_older_than(self, generation: int) -> None:
        for task, task_generation in list(self._tasks.items()):
            if task_generation < generation:
                task.cancel()

    def _finish(self, message: Message, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self._tracker.finish((message.topic, message.partition), message.offset)

    async def _deliver(self, message: Message, generation: int) -> None:
        """Delivers until success, a final failure or the TTL. A cancelled delivery stays unfinished, so its
        offset is never committed and the message comes again after a restart."""
        sub = self.subscription
        try:
            schema = await self._context.content.schema(message)
        except Exception:
            log.warning("no schema version %s for %s", message.schema_version, message.topic, exc_info=True)
            schema = None
        if self._filters and not self._filters.passes(message, lambda m: self._context.content.document(m, schema)):
            self.metrics.count("filtered")
            self._finish(message, generation)
            return
        self._trace(message, TraceStatus.INFLIGHT)
        deadline = time.monotonic() + sub.serial_policy.message_ttl
        if sub.serial_policy.sending_delay:
            await asyncio.sleep(sub.serial_policy.sending_delay / 1000)
        retries = 0
        while True:
            sub = self.subscription
            policy = sub.serial_policy
            await self.rate.acquire()
            result = await self._attempt(sub, message, retries, schema)
            verdict = judge(result, policy.retry_client_errors)
            self.rate.record(failed=verdict.slow_down)
            self.metrics.response(result.status, result.timed_out)
            if not verdict.retry:
                self.metrics.count("delivered")
                self._trace(message, TraceStatus.SUCCESS)
                break
            backoff = Backoff(
                policy.message_backoff / 1000, policy.backoff_multiplier, policy.backoff_max_interval_in_sec
            ).delay(retries, result.retry_after)
            if time.monotonic() + backoff > deadline:
                await self._discard(message, result)
                break
            self._trace(message, TraceStatus.FAILED, result.description)
            retries += 1
            await asyncio.sleep(backoff)
        self._finish(message, generation)

    async def _attempt(self, sub: Subscription, message: Message, retries: int, schema: str | None) -> SendResult:
        body, content_type, extra = self._context.content.body(sub, message, schema)
        headers = {**self._context.sender.headers(sub, message, retries, content_type), **extra}
        return await self._context.sender.send(sub, sub.endpoint.url, body, headers, sub.serial_policy.request_timeout)

    async def _discard(self, message: Message, result: SendResult) -> None:
        self.metrics.count("discarded")
        self._trace(message, TraceStatus.DISCARDED, result.description)
        record = UndeliveredMessage(
            timestamp=int(time.time() * 1000),
            subscription=self.subscription.name,
            topicName=self.subscription.topic_name.qualified,
            status="DISCARDED",
            reason=result.description,
            message=message.body.decode("utf-8", "replace"),
            partition=message.partition,
            offset=message.offset,
            cluster=self._context.cluster,
        )
        log.info("discarded %s of %s: %s", message.message_id, self.name, result.description)
        try:
            await asyncio.to_thread(
                self._context.repository.put_document, UNDELIVERED_NAMESPACE, self.name, record.to_document()
            )
        except Exception:
            log.warning("recording the undelivered message of %s failed", self.name, exc_info=True)

    def _trace(self, message: Message, status: TraceStatus, reason: str | None = None) -> None:
        tracker = self._context.tracker
        if tracker is None or not self.subscription.tracking_enabled:
            return
        if status is not TraceStatus.DISCARDED and self.subscription.tracking_mode.value == "discardedOnly":
            return
        tracker.consumer(
            message.message_id, message.topic, self.subscription.name, status, message.partition, message.offset, reason
        )

    # --- metrics and retransmission requests, once per metrics interval ---

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(self._context.metrics_interval)
            try:
                await self._publish_metrics()
                await self._check_retransmission()
            except Exception:
                log.warning("reporting of %s failed", self.name, exc_info=True)

    async def _publish_metrics(self) -> None:
        with self._lock:
            inflight = self._tracker.inflight()
        self.metrics.gauges(inflight, self.rate.rate, self.rate.mode.value)
        await asyncio.to_thread(
            self._context.repository.put_document, SNAPSHOT_NAMESPACE, self._snapshot_key, self.metrics.snapshot()
        )

    async def _check_retransmission(self) -> None:
        repository = self._context.repository
        request: dict[str, Any] | None = await asyncio.to_thread(
            repository.get_document, RETRANSMISSION_NAMESPACE, self.name
        )
        if not request or request.get("requestedAt") == self._retransmission_seen:
            return
        self._retransmission_seen = request.get("requestedAt")
        topic = self.subscription.topic_name.qualified
        self._seek_to = {(topic, int(p)): int(o) for p, o in request.get("offsets", {}).items()}
        await asyncio.to_thread(
            repository.put_document,
            RETRANSMISSION_NAMESPACE,
            self.name,
            {**request, "appliedAt": int(time.time() * 1000)},
        )

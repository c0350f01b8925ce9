"""One subscription's SERIAL consumer: reads its topic in the subscription's consumer group and pushes each
message to the endpoint, committing only offsets below every message still in flight.

The Kafka consumer lives on its own thread (librdkafka calls block); sending runs on the asyncio loop. The thread
reads ahead into a bounded buffer on the loop (``read_ahead.py``; ``--consumer-read-ahead-messages`` and
``-bytes``). Buffered messages count as unfinished, so their offsets are not committed before they are delivered.
A retransmission moves the group to new offsets: it starts a new *generation*; deliveries of the old one are
cancelled and can no longer touch the offset tracker.

An unexpected exception in the Kafka thread or in a delivery is a crash: the consumer reports it once through
``on_crash`` (the supervisor then restarts it). Crashed deliveries stay unfinished, so their messages come again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from hermes.broker.connection import KafkaConnection
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.consumers.content import ContentConverter
from hermes.consumers.failure_log import FailureLog, describe
from hermes.consumers.filtering import MessageFilters
from hermes.consumers.metrics import SNAPSHOT_NAMESPACE, UNDELIVERED_NAMESPACE, SubscriptionMetrics, UndeliveredMessage
from hermes.consumers.offsets import OffsetTracker, Partition
from hermes.consumers.rate import AdaptiveRateLimiter, RateMode, RateSettings
from hermes.consumers.read_ahead import ReadAhead
from hermes.consumers.recipients import Recipients
from hermes.consumers.resolver import EndpointAddressResolver, EndpointItself
from hermes.consumers.retry import Backoff
from hermes.consumers.sender.http import HttpSender
from hermes.consumers.sender.result import SendResult
from hermes.domain.message import Message
from hermes.domain.subscription import Subscription, TrackingMode
from hermes.errors import EndpointResolutionError
from hermes.metadata.repository import MetadataRepository
from hermes.tracking import TraceStatus, Tracker

log = logging.getLogger(__name__)

RETRANSMISSION_NAMESPACE = "retransmission"
# The undelivered reason of a message whose TTL ended before the rate limiter let its first attempt go.
_HELD_BACK = "Message sending failed: messageTtl ended while the sending rate was limited"
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
    fetch_wait_ms: int = 500
    read_ahead_messages: int = 200
    read_ahead_bytes: int = 4 * 1024 * 1024
    rate: RateSettings = field(default_factory=RateSettings)
    failure_log_interval: float = 30.0
    resolver: EndpointAddressResolver = field(default_factory=EndpointItself)


CrashListener = Callable[[BaseException], None]


def _destination(subscription: Subscription) -> tuple[object, ...]:
    """Where the subscription's messages go: a change makes it another subscriber."""
    return subscription.endpoint, subscription.endpoint_address_resolver_metadata


class SerialConsumer:
    def __init__(
        self, subscription: Subscription, context: ConsumerContext, on_crash: CrashListener | None = None
    ) -> None:
        self.subscription = subscription
        self._context = context
        self._on_crash = on_crash
        self.crash: BaseException | None = None
        self._tracker = OffsetTracker()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._finished = threading.Event()  # room was freed: the Kafka thread may read more
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: dict[asyncio.Task[None], int] = {}
        self._read_ahead = ReadAhead(context.read_ahead_messages, context.read_ahead_bytes)
        self._waiting: set[asyncio.Task[Any]] = set()  # deliveries waiting for a retry or a rate slot
        self._generation = 0
        self._seek_to: dict[Partition, int] | None = None
        self._retransmission_seen: int | None = None
        self._filters = MessageFilters(subscription.filters)
        self.rate = AdaptiveRateLimiter(subscription.serial_policy.rate, context.rate)
        self.metrics = SubscriptionMetrics(subscription.topic_name.qualified, subscription.name)
        self._failures = FailureLog(self.name, context.failure_log_interval)
        self._redirected = asyncio.Event()  # set (and replaced) when the endpoint changes
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
        """Takes a changed subscription (endpoint, policy, filters, headers...) for every following attempt,
        those of messages in flight included. A new endpoint is a new subscriber: the retries waiting for the
        old one (their backoff, the rate limiter's slow or heartbeat slots) go at once."""
        redirected = _destination(subscription) != _destination(self.subscription)
        self.subscription = subscription
        self._filters = MessageFilters(subscription.filters)
        self.rate.set_max_rate(subscription.serial_policy.rate)
        if redirected:
            self._redirected.set()
            self._redirected = asyncio.Event()
            self.rate.reset()

    async def stop(self, drain_timeout: float = 5.0) -> None:
        """Stops reading, lets deliveries that are sending finish for a moment, commits what is done and closes.
        Deliveries cut short, or waiting for a retry or a rate slot, stay unfinished: their messages come again
        after a restart. (Waiting for those would hold a failing subscription's stop for the whole timeout.)"""
        self._stopping.set()
        self._finished.set()  # wakes a Kafka thread waiting for room
        deadline = time.monotonic() + drain_timeout
        while (sending := [t for t in self._tasks if t not in self._waiting]) and time.monotonic() < deadline:
            await asyncio.wait(sending, timeout=0.05)  # short: a delivery may go from sending to waiting
        for task in list(self._tasks):
            task.cancel()
        self._read_ahead.clear()  # unfinished, so never committed: they come again after a restart
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        if self._reporter is not None:
            self._reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reporter
        await self._publish_metrics()

    def _capacity(self) -> int:
        """How many read messages may be unfinished (sending, waiting or buffered) before reading stops."""
        return self.subscription.serial_policy.inflight_size + self._read_ahead.messages

    def _refill_at(self) -> int:
        """The room that must be free before the Kafka thread reads again."""
        return self._read_ahead.refill_at

    def _byte_budget(self) -> int | None:
        """Bytes the Kafka thread may still read (None: no bound)."""
        return self._read_ahead.byte_budget()

    @property
    def _snapshot_key(self) -> str:
        return f"{self.name}/{self._context.node_id}"

    # --- the Kafka thread ---

    def _run(self) -> None:
        try:
            consumer = BrokerConsumer(
                self._context.connection,
                self.subscription.consumer_group_id,
                session_timeout_ms=self._context.session_timeout_ms,
                fetch_wait_ms=self._context.fetch_wait_ms,
                on_revoke=lambda partitions: self._commit(consumer, only=partitions, forget=True),
            )
        except Exception as exc:  # e.g. a TLS file that cannot be read
            self._thread_crashed(exc)
            return
        try:
            consumer.subscribe([self.subscription.topic_name.qualified])
            paused = False
            full_since: float | None = None
            last_commit = time.monotonic()
            while not self._stopping.is_set():
                if self._seek_to is not None:
                    self._apply_seek(consumer)
                with self._lock:
                    room = self._capacity() - self._tracker.inflight()
                    generation = self._generation
                budget = self._byte_budget()
                full = room < min(self._refill_at(), self._capacity()) or (budget is not None and budget <= 0)
                # A full in-flight budget first just stops taking messages: librdkafka keeps prefetching into
                # its bounded queue. Pausing would drop that queue (a resume fetches from scratch, which cut
                # throughput tenfold), so partitions are paused only in a long stall, to keep polling (and with
                # it the group membership) going while nothing can be taken. A full consumer whose subscriber is
                # failing (the limiter left NORMAL) is paused at once: its prefetching would only load the
                # broker and this process for the other subscriptions.
                now = time.monotonic()
                full_since = (full_since or now) if full else None
                stalled = full_since is not None and (
                    now - full_since > _PAUSE_AFTER or self.rate.mode is not RateMode.NORMAL
                )
                if stalled != paused:
                    (consumer.pause if stalled else consumer.resume)(consumer.assignment())
                    paused = stalled
                if full:
                    # Sleeps until a delivery finishes: a consumer stuck at its limit (a failing subscriber)
                    # must not keep waking up and contending for the GIL with every other consumer. Paused, it
                    # still polls now and then, without waiting, to serve the group's callbacks.
                    self._finished.wait(0.5 if paused else 0.05)
                    self._finished.clear()
                    messages = consumer.poll(max_messages=100, timeout=0) if paused else []
                else:  # never more than the room left: the capacity bounds the messages read and unfinished
                    messages = consumer.poll(max_messages=min(room, 500), timeout=0.1, max_bytes=budget)
                if messages:
                    with self._lock:
                        if generation != self._generation:
                            continue  # read before a retransmission moved the group: dropped
                        for message in messages:
                            self._tracker.read((message.topic, message.partition), message.offset)
                    if budget is not None:  # the batch consumer keeps no read-ahead
                        self._read_ahead.count(messages)
                    assert self._loop is not None
                    self._loop.call_soon_threadsafe(self._dispatch, messages, generation)
                if time.monotonic() - last_commit >= self._context.commit_interval:
                    self._commit(consumer)
                    last_commit = time.monotonic()
            self._commit(consumer)
        except Exception as exc:
            self._thread_crashed(exc)
        finally:
            consumer.close()

    def _thread_crashed(self, error: Exception) -> None:
        log.error("Kafka consumer of %s failed", self.name, exc_info=error)
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._crashed, error)

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
            self._read_ahead.uncount(messages)
            return
        self._read_ahead.add(messages, generation)
        self._start_deliveries()

    def _start_deliveries(self) -> None:
        """Starts buffered messages while fewer than inflightSize deliveries run; wakes the Kafka thread when
        enough room is free. Messages of an older generation or of a revoked partition are dropped."""
        limit = self.subscription.serial_policy.inflight_size
        while len(self._tasks) < limit and not self._stopping.is_set() and (item := self._read_ahead.take()):
            message, generation = item
            with self._lock:
                if generation != self._generation or not self._tracker.pending(
                    (message.topic, message.partition), message.offset
                ):
                    continue
            task = asyncio.create_task(self._deliver(message, generation))
            self._tasks[task] = generation
            task.add_done_callback(self._delivery_done)
        if self._read_ahead.low():
            self._finished.set()

    def _delivery_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("delivery of %s crashed", self.name, exc_info=error)
            self._crashed(error)
        self._start_deliveries()

    def _crashed(self, error: BaseException) -> None:
        """Reports the first crash (none once stopping: the stop's own cancellations are not crashes)."""
        if self.crash is not None or self._stopping.is_set():
            return
        self.crash = error
        if self._on_crash is not None:
            self._on_crash(error)

    def _cancel_older_than(self, generation: int) -> None:
        for task, task_generation in list(self._tasks.items()):
            if task_generation < generation:
                task.cancel()
        self._read_ahead.drop_older_than(generation)

    def _finish(self, message: Message, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self._tracker.finish((message.topic, message.partition), message.offset)

    async def _deliver(self, message: Message, generation: int) -> None:
        """Delivers until success, a final failure or the TTL. A cancelled delivery stays unfinished, so its
        offset is never committed and the message comes again after a restart. Each attempt reads the
        subscription as it is then (an update may come while the message waits)."""
        started = time.monotonic()  # messageTtl counts from here
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
        if delay := sub.serial_policy.sending_delay / 1000:
            # counted from publishing, so a backlog of older messages goes at once; never longer than the delay
            # itself, whatever the publishing node's clock said
            await asyncio.sleep(min(delay, message.publish_timestamp / 1000 + delay - time.time()))
        retries = 0
        recipients = Recipients(sub.mode)
        reason = _HELD_BACK  # why the message is not delivered yet
        while True:
            if not await self._rate_slot(self._ttl_left(started)):
                await self._discard(message, reason)
                break
            sub = self.subscription
            policy = sub.serial_policy
            results: dict[str, SendResult] = {}
            try:
                addresses = await self._context.resolver.resolve(sub.endpoint, sub.endpoint_address_resolver_metadata)
            except EndpointResolutionError as exc:
                outcome = recipients.unresolved(exc.message)
                self._failures.failed(outcome.reason)
            else:
                outcome, results = await recipients.attempt(
                    addresses,
                    functools.partial(self._attempt, sub, message, schema),
                    policy.retry_client_errors,
                )
            self.rate.record(failed=outcome.slow_down)
            for url, result in results.items():
                self._attempted(result, url)
            if not outcome.retry:
                self.metrics.count("delivered")
                self._trace(message, TraceStatus.SUCCESS)
                break
            reason = outcome.reason
            backoff = Backoff(
                policy.message_backoff / 1000, policy.backoff_multiplier, policy.backoff_max_interval_in_sec
            ).delay(retries, outcome.retry_after)
            if backoff > self._ttl_left(started):
                await self._discard(message, reason)
                break
            self._trace(message, TraceStatus.FAILED, reason)
            retries += 1
            await self._wait(self._backoff(backoff))
        self._finish(message, generation)

    def _ttl_left(self, started: float) -> float:
        """Seconds left of the messageTtl (as the subscription says now) of a message in flight since ``started``."""
        return started + self.subscription.message_ttl_seconds - time.monotonic()

    async def _rate_slot(self, within: float) -> bool:
        """Waits for a sending slot; False when ``within`` seconds (the message's TTL) end first."""
        try:
            async with asyncio.timeout(max(within, 0.0)):
                await self._wait(self.rate.acquire())
        except TimeoutError:
            return False
        return True

    async def _backoff(self, seconds: float) -> None:
        """Sleeps before a retry; less when the endpoint changes, since the wait was for the old one."""
        redirected = self._redirected
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await redirected.wait()

    def _attempted(self, result: SendResult, url: str | None) -> None:
        """Counts one request's result in the metrics and, when it failed, in the failure log."""
        self.metrics.response(result.status, result.timed_out)
        if not result.succeeded:
            self._failures.failed(describe(result, url))

    async def _wait(self, waiting: Awaitable[None]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        try:
            await waiting
        finally:
            self._waiting.discard(task)

    async def _attempt(
        self, sub: Subscription, message: Message, schema: str | None, url: str, retries: int
    ) -> SendResult:
        body, content_type, extra = self._context.content.body(sub, message, schema)
        headers = {**self._context.sender.headers(sub, message, retries, content_type), **extra}
        return await self._context.sender.send(sub, url, body, headers, sub.serial_policy.request_timeout)

    async def _discard(self, message: Message, reason: str) -> None:
        self.metrics.count("discarded")
        self._trace(message, TraceStatus.DISCARDED, reason)
        record = UndeliveredMessage(
            timestamp=int(time.time() * 1000),
            subscription=self.subscription.name,
            topicName=self.subscription.topic_name.qualified,
            status="DISCARDED",
            reason=reason,
            message=message.body.decode("utf-8", "replace"),
            partition=message.partition,
            offset=message.offset,
            cluster=self._context.cluster,
        )
        log.info("discarded %s of %s: %s", message.message_id, self.name, reason)
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
        if status is not TraceStatus.DISCARDED and self.subscription.tracking_mode is TrackingMode.DISCARDED_ONLY:
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

    # --- metrics and retransmission requests, once per metrics interval ---

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(self._context.metrics_interval)
            self._failures.flush()
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

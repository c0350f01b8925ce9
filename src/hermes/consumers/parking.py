"""Parking (``subscriptionPolicy.retryParking``): a SERIAL message whose next attempt is further away than the
threshold waits in its subscription's retry topic (``Subscription.retry_topic``) rather than in memory, so its
partition's committed offset moves past it and the partition keeps flowing.

A message is parked by producing it (acks=all) with its due time, its attempts so far and when its first attempt
was (its messageTtl counts from there); only once the broker acknowledged it does its delivery end, and with it
its offset in its own partition. One thread of the process (``ParkingLot``) reads every retry topic through one
Kafka consumer assigned by hand, and hands each parked message to its subscription (``ParkedMessages``), which
keeps it until it is due and then delivers it through the subscription's own delivery (rate limit, retries,
TTL; its filters were passed before it was parked). A retry-topic offset is committed, to the subscription's
parking group, once its message is finished: delivered, discarded or parked again. A message read and not yet
finished when the process dies is read again: duplicates at worst, never a loss.

Where each subscription reads in a consumer group of its own (a cluster), so do its parked messages
(``ParkingGroupReader``): Kafka shares the retry topic's partitions between the nodes, each parked message is
delivered by one of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.broker.producer import BrokerProducer
from hermes.consumers.offsets import OffsetTracker, Partition
from hermes.consumers.subscription_metrics import SubscriptionMetrics
from hermes.domain.cloudevents import CloudEvent
from hermes.domain.message import PLACEHOLDER_FORMAT, Message, kafka_headers
from hermes.domain.subscription import Subscription, is_retry_topic
from hermes.domain.topic import Ack
from hermes.errors import BrokerUnavailable, HermesError
from hermes.tasks import NamedThread, ended

log = logging.getLogger(__name__)

# The Kafka headers a parked record carries besides the message's own: when its next attempt is due and when its
# first attempt was (epoch millis), and how many attempts it had
PARKED_DUE = "hermes-parked-due"
PARKED_FIRST_ATTEMPT = "hermes-parked-first-attempt"
PARKED_ATTEMPTS = "hermes-parked-attempts"
# Where the message was read: its traces and undelivered record name its own topic, partition and offset
PARKED_FROM = "hermes-parked-from"

# Parked messages a subscription holds in memory, read and not yet due, before its retry topic is paused
_HELD_MAX = 2000
# Seconds a stopping parking thread has for its last commit and its Kafka consumer's close (librdkafka bounds a
# group member's by about the session timeout, 6 s by default here)
_CLOSE_BOUND = 10.0

# A parked message's delivery: (the message as it was read, its attempts so far, its messageTtl's start on the
# monotonic clock). Returns once it is finished: delivered, discarded or parked again.
Redeliver = Callable[[Message, int, float], Coroutine[Any, Any, None]]


@dataclass(order=True)
class _Parked:
    due: float  # epoch seconds
    seq: int
    partition: Partition  # of the retry topic
    offset: int
    message: Message
    attempts: int
    first_attempt: float  # epoch seconds


class ParkedMessages:
    """One subscription's parked messages: those read from its retry topic, each delivered when due, at most
    inflightSize at once; the offsets of the finished ones are committed by the lot."""

    def __init__(
        self,
        subscription: Subscription,
        redeliver: Redeliver,
        metrics: SubscriptionMetrics,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.subscription = subscription
        self.metrics = metrics
        self.topic = subscription.retry_topic
        self._redeliver = redeliver
        self._loop = loop
        self.lock = threading.Lock()  # the tracker, shared with the lot's thread
        self.tracker = OffsetTracker()
        self.start: dict[Partition, int] = {}  # where reading its retry topic started
        self.reading = False  # its retry topic's partitions are assigned to the lot's consumer
        self.held = 0  # read and not finished (the lot's thread pauses the topic above _HELD_MAX)
        self._heap: list[_Parked] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: dict[asyncio.Task[None], _Parked] = {}
        self._closed = False
        self.activating = asyncio.Lock()

    def arrived(self, items: list[_Parked]) -> None:
        """On the loop: messages read from the retry topic (already counted as read by the tracker)."""
        if self._closed:
            return
        for item in items:
            item.seq = next(self._seq)
            heapq.heappush(self._heap, item)
        self._release()

    def _release(self) -> None:
        """Starts the due messages while fewer than inflightSize run; a timer for the next one otherwise."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        limit = self.subscription.serial_policy.inflight_limit
        now = time.time()
        while self._heap and len(self._tasks) < limit and self._heap[0].due <= now:
            item = heapq.heappop(self._heap)
            started = time.monotonic() - max(0.0, now - item.first_attempt)
            task = self._loop.create_task(self._redeliver(item.message, item.attempts, started))
            self._tasks[task] = item
            task.add_done_callback(functools.partial(self._done, item))
        if self._heap and len(self._tasks) < limit:
            self._timer = self._loop.call_later(max(0.0, self._heap[0].due - now), self._release)

    def _done(self, item: _Parked, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        if task.cancelled():  # stopped or its partition revoked: unfinished, so read again
            with self.lock:
                self.held -= 1
            return
        if (error := task.exception()) is not None:
            log.error("delivery of a parked message of %s crashed", self.topic, exc_info=error)
            return  # unfinished: read again after a restart
        with self.lock:
            self.tracker.finish_one(item.partition, item.offset)
            self.held -= 1
        if not self._closed:
            self._release()

    async def close(self) -> None:
        """Stops delivering; what is not finished stays uncommitted."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        self._heap.clear()

    async def drop(self, partitions: set[Partition]) -> None:
        """Its retry topic's ``partitions`` went to another node: their messages, waiting or being delivered, are
        left to it (unfinished, so it reads them from the last commit)."""
        kept = [item for item in self._heap if item.partition not in partitions]
        with self.lock:
            self.held -= len(self._heap) - len(kept)
        self._heap = kept
        heapq.heapify(self._heap)
        cancelled = [task for task, item in self._tasks.items() if item.partition in partitions]
        for task in cancelled:
            task.cancel()
        if cancelled:
            await asyncio.wait(cancelled)
        if not self._closed:
            self._release()


class ParkingLot:
    """The process's parking: produces parked messages and reads every retry topic on one thread."""

    def __init__(
        self,
        connection: KafkaConnection,
        node_id: str,
        commit_interval: float,
        grouped: bool = False,
        session_timeout_ms: int = 6000,
    ) -> None:
        self._connection = connection
        self._session_timeout_ms = session_timeout_ms  # of the parking groups: a dead node's share moves this soon
        # each subscription's consumer group shares its partitions between nodes (a cluster): its retry topic too
        self._grouped = grouped
        self._groups: dict[str, ParkingGroupReader] = {}  # by retry topic, when grouped
        self._admin = BrokerAdmin(connection)
        self._producer: BrokerProducer | None = None  # made at the first park: most processes never park
        self._committer = f"hermes-parking:{node_id}"
        self._commit_interval = commit_interval
        self._node_id = node_id
        self._by_name: dict[str, ParkedMessages] = {}
        self._by_topic: dict[str, ParkedMessages] = {}  # those reading, by retry topic; under _lock
        self._lock = threading.Lock()
        self._changes: list[tuple[bool, dict[Partition, int]]] = []  # (add, partitions): under _lock
        self._retry_topics: set[str] = set()  # retry topics known to exist
        self._stopping = threading.Event()
        self._woken = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._retry_topics = {n for n in await asyncio.to_thread(self._admin.topic_names) if is_retry_topic(n)}

    async def stop(self) -> None:
        self._stopping.set()
        self._woken.set()
        if await ended(self._thread, _CLOSE_BOUND, "the parking lot's Kafka consumer"):
            await asyncio.to_thread(self._admin.close)  # else left behind with the thread, which commits through it
        if self._producer is not None:
            await asyncio.to_thread(self._producer.close, 5.0)

    # --- on the loop ---

    async def open(self, subscription: Subscription, redeliver: Redeliver, metrics: SubscriptionMetrics) -> None:
        """A SERIAL subscription's consumer started: its parked messages are read if parking is on or its retry
        topic exists (parking turned off since: those parked before are still delivered)."""
        assert self._loop is not None
        parked = self._by_name[subscription.qualified_name.qualified] = ParkedMessages(
            subscription, redeliver, metrics, self._loop
        )
        if subscription.serial_policy.retry_parking is not None or parked.topic in self._retry_topics:
            try:
                await self._activate(parked)
            except HermesError as exc:  # read at its first park, or when it starts again
                log.warning("reading the parked messages of %s failed: %s", parked.topic, exc.message)

    async def close(self, subscription: Subscription) -> None:
        """Its consumer stopped (suspended, deleted, moved, crashed): what is finished is committed, the rest
        is read again when it starts."""
        parked = self._by_name.pop(subscription.qualified_name.qualified, None)
        if parked is None:
            return
        await parked.close()
        if (group := self._groups.pop(parked.topic, None)) is not None:
            await group.stop()  # it commits what is finished and leaves the group
        elif parked.reading:
            with self._lock:
                self._by_topic.pop(parked.topic, None)
                self._changes.append((False, parked.start))
            self._woken.set()
            await asyncio.to_thread(self._commit, parked, True)

    def update(self, subscription: Subscription) -> None:
        if (parked := self._by_name.get(subscription.qualified_name.qualified)) is not None:
            parked.subscription = subscription

    async def park(
        self, subscription: Subscription, messages: Sequence[Message], delay: float, attempts: int, started: float
    ) -> bool:
        """Parks a message whose next attempt is ``delay`` seconds away, when its subscription parks that long a
        wait: whether it is parked (the broker has it). ``attempts``: made so far; ``started``: its messageTtl's
        start on the monotonic clock."""
        parking = subscription.serial_policy.retry_parking
        parked = self._by_name.get(subscription.qualified_name.qualified)
        if parking is None or parked is None or len(messages) != 1 or delay * 1000 <= parking.threshold_ms:
            return False
        [message] = messages
        now = time.time()
        headers = kafka_headers(
            message.message_id, message.publish_timestamp, message.schema_version, message.propagated_headers
        )
        if message.cloud_event is not None:
            headers += CloudEvent(message.cloud_event, message.body).kafka_headers()
        if message.external_url is not None:
            headers.append(PLACEHOLDER_FORMAT)
        headers += [
            (PARKED_DUE, str(int((now + delay) * 1000)).encode()),
            (PARKED_FIRST_ATTEMPT, str(int((now - (time.monotonic() - started)) * 1000)).encode()),
            (PARKED_ATTEMPTS, str(attempts).encode()),
            (PARKED_FROM, f"{message.topic}/{message.partition}/{message.offset}".encode()),
        ]
        try:
            await self._activate(parked)
            if self._producer is None:
                self._producer = BrokerProducer(self._connection)
            await self._producer.send(parked.topic, message.body, key=message.key, headers=headers, ack=Ack.ALL)
        except HermesError as exc:  # it waits in memory, as without parking
            log.warning("parking a message of %s failed: %s", parked.topic, exc.message)
            return False
        return True

    async def _activate(self, parked: ParkedMessages) -> None:
        """Creates the retry topic if needed and starts reading it from the parking group's committed offsets."""
        async with parked.activating:
            if parked.reading:
                return
            subscription = parked.subscription
            if self._grouped:
                await asyncio.to_thread(self._ensure_topic, subscription)
                assert self._loop is not None
                self._groups[parked.topic] = ParkingGroupReader(
                    self._connection, parked, self._commit_interval, self._session_timeout_ms
                )
                self._groups[parked.topic].start(self._loop)
                parked.reading = True
                return
            offsets = await asyncio.to_thread(self._starting_offsets, subscription)
            parked.start = offsets
            with self._lock:
                self._by_topic[parked.topic] = parked
                self._changes.append((True, offsets))
            parked.reading = True
            self._woken.set()
            if self._thread is None:  # the first subscription with parked messages
                self._thread = NamedThread(target=self._run, name="parking", daemon=True)
                self._thread.start()

    def _starting_offsets(self, subscription: Subscription) -> dict[Partition, int]:
        """Where reading the retry topic starts: the parking group's committed offsets (the topic is created if
        missing). An offset past the topic's end is of a deleted subscription's topic of the same name: from the
        beginning."""
        topic = subscription.retry_topic
        partitions = self._ensure_topic(subscription)
        committed = self._admin.committed_offsets(subscription.parking_group_id, topic)
        beginning, end = self._admin.beginning_offsets(topic), self._admin.end_offsets(topic)
        return {
            (topic, p): committed[p]
            if committed.get(p, -1) in range(beginning.get(p, 0), end.get(p, 0) + 1)
            else beginning.get(p, 0)
            for p in partitions
        }

    def _ensure_topic(self, subscription: Subscription) -> list[int]:
        """The partitions of the subscription's retry topic, created with its topic's partition count if missing."""
        topic = subscription.retry_topic
        if not self._admin.partitions(topic):
            count = max(1, len(self._admin.partitions(subscription.topic_name.qualified)))
            self._admin.create_topic(topic, count)
            self._retry_topics.add(topic)
        deadline = time.monotonic() + 10.0
        while not (partitions := self._admin.partitions(topic)):  # a topic created a moment ago may not be listed
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"the retry topic {topic} has no partitions")
            time.sleep(0.05)
        return partitions

    # --- the lot's thread ---

    def _run(self) -> None:
        while not self._stopping.is_set():
            consumer = BrokerConsumer(self._connection, f"hermes-parking-{self._node_id}")
            try:
                self._read(consumer)
            except Exception:
                # a new consumer reads on from the committed offsets a moment later (what is held is not read twice)
                log.exception("reading the parked messages failed; it reads on in a second")
                with self._lock:
                    self._changes = [(True, self._positions(parked)) for parked in self._by_topic.values()]
                self._stopping.wait(1.0)
            finally:
                consumer.close()

    @staticmethod
    def _positions(parked: ParkedMessages) -> dict[Partition, int]:
        """Its retry topic's committed offsets as far as it knows."""
        with parked.lock:
            return {**parked.start, **parked.tracker.committed()}

    def _read(self, consumer: BrokerConsumer) -> None:
        paused: set[str] = set()
        last_commit = time.monotonic()
        while not self._stopping.is_set():
            with self._lock:
                changes, self._changes = self._changes, []
                reading = list(self._by_topic.values())
            for add, offsets in changes:
                if add:
                    consumer.add_partitions(offsets)
                else:
                    consumer.remove_partitions(list(offsets))
                    paused -= {topic for topic, _ in offsets}
            for parked in reading:  # a subscription holding too many stops reading until it delivered some
                full = parked.held >= _HELD_MAX if parked.topic not in paused else parked.held > _HELD_MAX // 2
                if full != (parked.topic in paused):
                    (consumer.pause if full else consumer.resume)(list(parked.start))
                    (paused.add if full else paused.discard)(parked.topic)
            if reading:
                self._dispatch(consumer.poll_with_headers(max_messages=500, timeout=0.2))
            else:
                self._woken.wait(0.5)
                self._woken.clear()
            if time.monotonic() - last_commit >= self._commit_interval:
                last_commit = time.monotonic()
                for parked in reading:
                    self._commit(parked, False)
                    positions = self._positions(parked)
                    ends = consumer.ends(positions)
                    parked.metrics.parked(sum(max(0, ends[p] - o) for p, o in positions.items() if p in ends))

    def _dispatch(self, records: list[tuple[Message, dict[str, Any]]]) -> None:
        assert self._loop is not None
        arrivals: dict[ParkedMessages, list[_Parked]] = {}
        with self._lock:
            for message, headers in records:
                parked = self._by_topic.get(message.topic)
                if parked is None:
                    continue  # closed meanwhile
                if (item := _take(parked, message, headers)) is not None:
                    arrivals.setdefault(parked, []).append(item)
        for parked, items in arrivals.items():
            self._loop.call_soon_threadsafe(parked.arrived, items)

    def _commit(self, parked: ParkedMessages, wait: bool) -> None:
        """Commits the retry-topic offsets of the finished parked messages; with ``wait``, waits for the broker."""
        with parked.lock:
            offsets = parked.tracker.committable()
        if not offsets:
            return
        finished = threading.Event()

        def done(error: Exception | None) -> None:
            if error is None:
                with parked.lock:
                    parked.tracker.mark_committed(offsets)
            else:
                log.warning("committing the parked offsets of %s failed: %s", parked.topic, error)
            finished.set()

        try:
            self._admin.set_group_offsets(parked.subscription.parking_group_id, offsets, self._committer, done)
        except Exception as exc:
            done(exc)
        if wait:
            finished.wait(5.0)


class ParkingGroupReader:
    """In a cluster, one subscription's retry topic read in its parking group by a Kafka consumer of its own on
    each node running it: Kafka gives each retry partition to one node, so a parked message is delivered by one
    node. When a partition goes to another node, its messages waiting or being delivered here are dropped and what
    is finished is committed first: the new owner reads on from there (a message being delivered may come twice).
    """

    def __init__(
        self, connection: KafkaConnection, parked: ParkedMessages, commit_interval: float, session_timeout_ms: int
    ) -> None:
        self._connection = connection
        self._parked = parked
        self._commit_interval = commit_interval
        self._session_timeout_ms = session_timeout_ms
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = NamedThread(target=self._run, name=f"parking-{self._parked.topic}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """As a receiver closes (``MessageReceiver.close``): a Kafka consumer that does not leave is left behind."""
        self._stopping.set()
        await ended(self._thread, _CLOSE_BOUND, f"the parking consumer of {self._parked.topic}, leaving its group")

    def _run(self) -> None:
        parked = self._parked
        while not self._stopping.is_set():
            try:
                self._member()
            except Exception:  # a new member reads on from the committed offsets a moment later
                log.exception("reading the parked messages of %s failed; it reads on in a second", parked.topic)
                with parked.lock:
                    held = list(parked.tracker.partitions())
                self._revoked(None, held)
                self._stopping.wait(1.0)

    def _member(self) -> None:
        """Reads as one member of the parking group until stopped, then commits and leaves the group."""
        parked = self._parked
        consumer = BrokerConsumer(
            self._connection,
            parked.subscription.parking_group_id,
            session_timeout_ms=self._session_timeout_ms,
            on_revoke=lambda partitions: self._revoked(consumer, partitions),
        )
        try:
            consumer.subscribe([parked.topic])
            self._read(consumer)
            self._commit(consumer, None)
        finally:
            consumer.close()

    def _read(self, consumer: BrokerConsumer) -> None:
        assert self._loop is not None
        parked, paused = self._parked, False
        last_commit = time.monotonic()
        while not self._stopping.is_set():
            full = parked.held > _HELD_MAX // 2 if paused else parked.held >= _HELD_MAX
            if full != paused:  # holding too many: reads on once it delivered some
                (consumer.pause if full else consumer.resume)(consumer.assignment())
                paused = full
            items = [
                item
                for message, headers in consumer.poll_with_headers(max_messages=500, timeout=0.2)
                if (item := _take(parked, message, headers)) is not None
            ]
            if items:
                self._loop.call_soon_threadsafe(parked.arrived, items)
            if time.monotonic() - last_commit >= self._commit_interval:
                last_commit = time.monotonic()
                self._commit(consumer, None)
                with parked.lock:
                    positions = parked.tracker.committed()
                ends = consumer.ends(positions)
                parked.metrics.parked(sum(max(0, ends[p] - o) for p, o in positions.items() if p in ends))

    def _revoked(self, consumer: BrokerConsumer | None, partitions: list[Partition]) -> None:
        """On the thread (during a poll): ``partitions`` go to another node (or, with no consumer, this one failed)."""
        assert self._loop is not None
        try:
            asyncio.run_coroutine_threadsafe(self._parked.drop(set(partitions)), self._loop).result(10.0)
        except Exception:
            log.warning("dropping the revoked parked messages of %s failed", self._parked.topic, exc_info=True)
        if consumer is not None:
            self._commit(consumer, partitions)
        with self._parked.lock:
            self._parked.tracker.forget(partitions)

    def _commit(self, consumer: BrokerConsumer, only: list[Partition] | None) -> None:
        parked = self._parked
        with parked.lock:
            offsets = parked.tracker.committable()
        if only is not None:
            offsets = {p: o for p, o in offsets.items() if p in only}
        try:
            consumer.commit(offsets)
        except HermesError as exc:  # the next one tries again; a new owner reads the rest again
            log.warning("committing the parked offsets of %s failed: %s", parked.topic, exc.message)
            return
        with parked.lock:
            parked.tracker.mark_committed(offsets)


def _take(parked: ParkedMessages, message: Message, headers: dict[str, Any]) -> _Parked | None:
    """A record read of ``parked``'s retry topic, counted as read; None when it is held already (read again by a
    new Kafka consumer)."""
    partition = (message.topic, message.partition)
    with parked.lock:
        if parked.tracker.pending(partition, message.offset):
            return None
        parked.tracker.read(partition, [message.offset])
        parked.held += 1
    return _parked(message, headers)


def _parked(message: Message, headers: dict[str, Any]) -> _Parked:
    """A record of a retry topic as the message it parks, with where it was read from."""
    retry = (message.topic, message.partition), message.offset
    with contextlib.suppress(ValueError, KeyError):
        topic, partition, offset = headers[PARKED_FROM].decode().rsplit("/", 2)
        message.topic, message.partition, message.offset = topic, int(partition), int(offset)
    due = _number(headers.get(PARKED_DUE)) / 1000
    first = _number(headers.get(PARKED_FIRST_ATTEMPT)) / 1000 or time.time()
    return _Parked(due, 0, retry[0], retry[1], message, int(_number(headers.get(PARKED_ATTEMPTS))), first)


def _number(value: bytes | None) -> float:
    try:
        return float(value) if value else 0.0
    except ValueError:
        return 0.0

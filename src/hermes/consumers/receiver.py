"""The Kafka side of one subscription's consumer (Hermes' ``receiver/``): reads the topic in the subscription's
consumer group, hands what it read to the delivery on the asyncio loop, seeks for a retransmission and commits
only offsets below every message still unfinished.

librdkafka calls block, so the Kafka consumer lives on its own thread. Its user, SERIAL or BATCH delivery, says
through ``Flow`` how much may be read. A message counts as unfinished from the moment it is read until its user
finishes it (delivered, discarded or filtered out), so no offset is committed before its message is done. A
retransmission moves the group to new offsets and starts a new *generation*: messages read before it can no
longer finish an offset, and the user drops them.

When another member joins the group, only the partitions that move are revoked (cooperative rebalancing): no
new delivery starts in them, the deliveries under way get a moment to finish, and what is finished is committed
before the partitions go. The member taking over thus sends again only what was still being delivered.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.consumers import attempts, retransmission
from hermes.consumers.context import ConsumerContext, CrashListener
from hermes.consumers.offsets import OffsetTracker, Partition
from hermes.consumers.retransmission import Retransmission
from hermes.domain.message import Message
from hermes.tasks import NamedThread, ended

log = logging.getLogger(__name__)

# Seconds a receiver may sit at its limit before its partitions are paused (see _read).
_PAUSE_AFTER = 10.0
# Seconds a revocation waits for the deliveries under way in the revoked partitions (the whole group's rebalance
# waits with it; a delivery still unfinished then is sent again by the next member).
_HANDOVER_WAIT = 3.0
# Seconds a closing receiver's thread has, besides the group's session timeout, for its last commit (tried for
# _HANDOVER_WAIT) and its Kafka consumer's close (which librdkafka bounds by about the session timeout)
_CLOSE_BOUND = _HANDOVER_WAIT + 2.0


def close_bound(context: ConsumerContext) -> float:
    """Seconds a closing receiver's Kafka thread has to end before its close goes on without it."""
    return _CLOSE_BOUND + context.session_timeout_ms / 1000


@dataclass(frozen=True)
class Limits:
    """How much may be read now, as the delivery sees it."""

    capacity: int
    """Read messages that may be unfinished (sending, waiting or buffered) before reading stops."""
    refill_at: int
    """The room that must be free before reading starts again."""
    byte_budget: int | None = None
    """Bytes that may still be read (None: no bound)."""
    failing: bool = False
    """The subscriber is failing: a receiver at its limit pauses its partitions at once."""


class Flow(Protocol):
    """The delivery a receiver reads for."""

    def limits(self) -> Limits:
        """Asked by the Kafka thread before each read."""
        ...

    def bounds(self) -> tuple[int, int | None]:
        """``limits``' capacity and byte budget, without building a ``Limits``: the shared reader asks for them for
        every record it hands to every subscription."""
        ...

    def read(self, messages: list[Message], size: int | None = None) -> None:
        """Called by the Kafka thread with what it just read, before the loop gets it (``size``: their bodies'
        bytes, when the caller has them already)."""
        ...

    def receive(self, messages: list[Message], generation: int) -> None:
        """Called on the loop with what was read in ``generation``."""
        ...

    def moved(self, generation: int) -> None:
        """Called on the loop when a retransmission started ``generation``: older messages are void."""
        ...

    def revoked(self, partitions: set[Partition]) -> None:
        """Called on the loop when ``partitions`` went to another member: what was read of them and waits is void
        (and must be gone before they may come back, read again)."""
        ...


class Receiver:
    """What a receiver keeps whatever reads for it: the unfinished messages, the generation, and the thread-safe
    calls of its delivery. Subclasses read (``start``) and commit."""

    def __init__(self, name: str, topic: str, group_id: str, context: ConsumerContext, on_crash: CrashListener) -> None:
        self._name = name
        self._topic = topic
        self._group_id = group_id
        self._context = context
        self._on_crash = on_crash
        self._tracker = OffsetTracker()
        self._lock = threading.Lock()  # the tracker and the generation, shared by the thread and the loop
        # per partition, the failed attempts of unfinished messages by offset, kept with the commits (attempts.py)
        self._attempts: dict[Partition, dict[int, int]] = {}
        self._noted: set[Partition] = set()  # partitions whose attempts changed since their last commit
        self._finished = threading.Condition(self._lock)  # notified when a revoked partition's delivery finishes
        self._revoking: set[Partition] = set()  # partitions being handed over: nothing new starts in them
        self._stopping = threading.Event()  # no more reading
        self._closing = threading.Event()  # the thread commits and leaves the group
        self._woken = threading.Event()  # room was freed, a seek was asked for, or the receiver is stopping
        # the reading thread waits for room: only then does a finished delivery wake it (setting the event at
        # every delivery cost a lock and a notify each, a tenth of a drain's CPU)
        self._waiting = False
        self._seek_to: dict[Partition, int] | None = None
        self._seek_requested_at = 0
        # the last retransmission requested, applied to each partition assigned whose commit notes an older one
        self._last_request: Retransmission | None = None
        self.applied = 0  # the requestedAt of the last retransmission applied, noted with every commit
        self._applied_before = 0  # the same, for the partitions of a seek asked for and not applied yet
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flow: Flow | None = None
        self.generation = 0
        self.lag = 0  # messages after the committed offsets of this node's partitions, as of the last commit

    def start(self, flow: Flow) -> None:
        raise NotImplementedError

    def stop_reading(self) -> None:
        """Reads no more; what is unfinished may still be finished and is committed by ``close``."""
        self._stopping.set()
        self._woken.set()
        with self._finished:
            self._finished.notify_all()  # a handover does not wait for deliveries a stop cuts short

    async def close(self) -> None:
        """Commits what is finished and stops reading for good."""
        raise NotImplementedError

    def wake(self) -> None:
        """Room was freed: a receiver waiting at its limit reads again. Once woken, not again: each set takes the
        event's lock and notifies (the thread reads the room after it clears the event, so nothing is lost)."""
        if self._waiting and not self._woken.is_set():
            self._woken.set()

    def seek(self, request: Retransmission) -> None:
        """Moves the group to the offsets of a retransmission, starting a new generation; a partition assigned
        later that notes an older one applied is read from them too (``noted``)."""
        self._last_request = request
        self._applied_before = self.applied
        self._seek_requested_at = request.requested_at
        self._seek_to = dict(request.offsets)
        self._woken.set()

    def starting_after(self, request: Retransmission | None) -> None:
        """Before ``start``: the last retransmission requested (see ``noted``)."""
        self._last_request = request
        self.applied = self._applied_before = request.requested_at if request is not None else 0

    def _seeking(self) -> dict[Partition, int]:
        """On the reading thread, as a seek is applied: its offsets (its requestedAt is now the one applied)."""
        offsets, self._seek_to = self._seek_to or {}, None
        self._applied_before = self.applied = self._seek_requested_at
        return offsets

    def _notes(self, offsets: Mapping[Partition, int], notes: Mapping[Partition, str]) -> dict[Partition, str]:
        """The metadata of a commit of ``offsets``: the retransmission applied, then the attempts ``notes``. A
        partition a retransmission is about to move notes the one before."""
        seeking = self._seek_to or {}
        return {
            p: retransmission.note(self._applied_before if p in seeking else self.applied) + notes.get(p, "")
            for p in offsets
        }

    def _room(self) -> tuple[Limits, int, int, bool]:
        """On the reading thread: the delivery's limits, the room left, the generation, and whether there is no
        room to read (then a finished delivery wakes the thread, from before the room was read on: no wake-up is
        lost before its wait)."""
        assert self._flow is not None
        self._waiting = True
        limits = self._flow.limits()
        with self._lock:
            room = limits.capacity - self._tracker.inflight()
            generation = self.generation
        budget = limits.byte_budget
        full = (
            self._stopping.is_set()
            or room < min(limits.refill_at, limits.capacity)
            or (budget is not None and budget <= 0)
        )
        self._waiting = full
        return limits, room, generation, full

    def take(self, message: Message, generation: int) -> bool:
        """Whether to deliver ``message`` now (not of an older generation nor of a revoked partition); if so its
        delivery counts as started."""
        partition = (message.topic, message.partition)
        with self._lock:
            return generation == self.generation and self._tracker.take_one(
                partition, message.offset, partition in self._revoking
            )

    def take_all(self, messages: list[Message], generation: int) -> list[bool]:
        """``take`` of each of ``messages`` (read in ``generation``), under one lock. One taken before (a batch's
        messages put back when the batch before was full) is taken again."""
        with self._lock:
            if generation != self.generation:
                return [False] * len(messages)
            taken: list[bool] = []
            for partition, offsets in _by_partition(messages):
                taken += self._tracker.take(partition, offsets, partition in self._revoking)
            return taken

    def pending_all(self, messages: list[Message], generations: list[int]) -> list[bool]:
        """Of each message, whether it is still to be finished: of the current generation and not finished nor
        forgotten (revoked). Under one lock."""
        with self._lock:
            current, tracker = self.generation, self._tracker
            if generations.count(current) == len(generations) and all(
                tracker.all_pending(partition, offsets) for partition, offsets in _by_partition(messages)
            ):
                return [True] * len(messages)
            return [
                generation == current and tracker.pending((message.topic, message.partition), message.offset)
                for message, generation in zip(messages, generations, strict=True)
            ]

    def attempts(self, message: Message) -> int:
        """The failed attempts at ``message`` so far: this process's, or an earlier one's noted with the commit."""
        if not self._attempts:
            return 0
        with self._lock:
            return self._attempts.get((message.topic, message.partition), {}).get(message.offset, 0)

    def failed(self, message: Message, count: int) -> None:
        """The ``count``-th attempt at ``message`` failed (noted with the next commit while it is unfinished)."""
        partition = (message.topic, message.partition)
        with self._lock:
            if self._tracker.pending(partition, message.offset):
                self._attempts.setdefault(partition, {})[message.offset] = count
                self._noted.add(partition)

    def noted(self, partition: Partition, metadata: str) -> int | None:
        """Takes the attempts a partition's committed offset noted (on the thread, before its first read). Returns
        where to read it from instead of the committed offset: the offset of the retransmission found at start,
        when the commit notes an older one applied (see ``retransmission``)."""
        if found := attempts.read(metadata):
            with self._lock:
                self._attempts[partition] = found
        request = self._last_request
        applied = retransmission.noted(metadata)
        if request is None or applied is None or applied >= request.requested_at:
            return None
        if (offset := request.offsets.get(partition)) is not None:
            log.info("retransmission of %s not applied to %s yet: reading from %d", self._name, partition, offset)
        return offset

    def _to_commit(self) -> tuple[dict[Partition, int], dict[Partition, str]]:
        """Under the lock: the offsets to commit (those that advanced, and those whose attempts changed) and the
        attempts noted with them."""
        offsets = self._tracker.committable()
        for partition in self._noted:
            if partition not in offsets and (position := self._tracker.position(partition)) is not None:
                offsets[partition] = position
        self._noted.clear()
        notes = {p: attempts.note(found, o) for p, o in offsets.items() if (found := self._attempts.get(p))}
        return offsets, self._notes(offsets, notes)

    def finish(self, message: Message, generation: int) -> None:
        with self._lock:
            if generation == self.generation:
                self._tracker.finish_one((message.topic, message.partition), message.offset)
                if self._attempts and (found := self._attempts.get((message.topic, message.partition))):
                    found.pop(message.offset, None)
            if self._revoking:
                self._finished.notify_all()

    def finish_all(self, messages: list[Message], generations: list[int]) -> None:
        with self._lock:
            current = self.generation
            if generations.count(current) != len(generations):
                messages = [m for m, generation in zip(messages, generations, strict=True) if generation == current]
            for partition, offsets in _by_partition(messages):
                self._tracker.finish(partition, offsets)
            if self._revoking:
                self._finished.notify_all()

    def unfinished(self) -> int:
        with self._lock:
            return self._tracker.inflight()

    @property
    def changes(self) -> int:
        """Reads, finishes and forgets so far (``OffsetTracker.changes``): while it stays, ``unfinished`` does."""
        return self._tracker.changes


class MessageReceiver(Receiver):
    """Reads in the subscription's own Kafka consumer group, on a thread of its own (distributed mode, where the
    group shares a subscription's partitions between the nodes that run it)."""

    def start(self, flow: Flow) -> None:
        self._loop = asyncio.get_running_loop()
        self._flow = flow
        self._thread = NamedThread(target=self._run, name=f"consumer-{self._name}", daemon=True)
        self._thread.start()

    async def close(self) -> None:
        """Commits what is finished and leaves the group. A Kafka consumer whose close does not return (librdkafka
        has had such bugs around cooperative rebalances, e.g. its issues 4527 and 4884) is left behind after
        ``_CLOSE_BOUND`` plus the session timeout, with a warning saying where: the group gives its partitions to
        the other members once that session times out, and what it had not committed is delivered again."""
        self.stop_reading()
        self._closing.set()
        await ended(self._thread, close_bound(self._context), f"the Kafka consumer of {self._name}, leaving its group")

    # --- the Kafka thread ---

    def _run(self) -> None:
        try:
            consumer = BrokerConsumer(
                self._context.connection,
                self._group_id,
                session_timeout_ms=self._context.session_timeout_ms,
                fetch_wait_ms=self._context.fetch_wait_ms,
                on_revoke=lambda partitions: self._hand_over(consumer, partitions),
                on_assign=self._assigned,
            )
        except Exception as exc:  # e.g. a TLS file that cannot be read
            self._crashed(exc)
            return
        try:
            consumer.subscribe([self._topic])
            self._read(consumer)
            self._commit_before_leaving(consumer)
        except Exception as exc:
            self._crashed(exc)
        finally:
            consumer.close()

    def _read(self, consumer: BrokerConsumer) -> None:
        assert self._flow is not None and self._loop is not None
        paused = False
        full_since: float | None = None
        last_commit = time.monotonic()
        while not self._closing.is_set():
            if self._seek_to is not None:
                self._apply_seek(consumer)
            limits, room, generation, full = self._room()
            budget = limits.byte_budget
            # A full receiver first just stops taking messages: librdkafka keeps prefetching into its bounded
            # queue. Pausing would drop that queue (a resume fetches from scratch, which cut throughput tenfold),
            # so partitions are paused only in a long stall, to keep polling (and with it the group membership)
            # going while nothing can be taken. A full receiver whose subscriber is failing is paused at once:
            # its prefetching would only load the broker and this process for the other subscriptions.
            now = time.monotonic()
            full_since = (full_since or now) if full else None
            stalled = full_since is not None and (now - full_since > _PAUSE_AFTER or limits.failing)
            if stalled != paused:
                (consumer.pause if stalled else consumer.resume)(consumer.assignment())
                paused = stalled
            if full:
                # Sleeps until room is freed: a receiver stuck at its limit (a failing subscriber) must not keep
                # waking up and contending for the GIL with every other consumer. Paused, it still polls now and
                # then, without waiting, to serve the group's callbacks.
                self._woken.wait(0.5 if paused else 0.05)
                self._waiting = False
                self._woken.clear()
                messages = consumer.poll(max_messages=100, timeout=0) if paused else []
            else:  # never more than the room left: the capacity bounds the messages read and unfinished
                messages = consumer.poll(max_messages=min(room, 500), timeout=0.1, max_bytes=budget)
            if messages:
                with self._lock:
                    if generation != self.generation:
                        continue  # read before a retransmission moved the group: dropped
                    for partition, offsets in _by_partition(messages):
                        self._tracker.read(partition, offsets)
                self._flow.read(messages)
                self._loop.call_soon_threadsafe(self._flow.receive, messages, generation)
            if time.monotonic() - last_commit >= self._context.commit_interval:
                self._commit(consumer)
                last_commit = time.monotonic()

    def _assigned(self, committed: dict[Partition, str]) -> dict[Partition, int]:
        """Where to read the assigned partitions from, where not from their committed offsets."""
        return {p: offset for p, metadata in committed.items() if (offset := self.noted(p, metadata)) is not None}

    def _crashed(self, error: Exception) -> None:
        log.error("Kafka consumer of %s failed", self._name, exc_info=error)
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._on_crash, error)

    def _apply_seek(self, consumer: BrokerConsumer) -> None:
        assert self._flow is not None and self._loop is not None
        offsets = self._seeking()
        with self._lock:
            self.generation += 1
            self._tracker.forget(list(self._tracker.partitions()))
            self._attempts.clear()
        assigned = set(consumer.assignment())
        for (topic, partition), offset in offsets.items():
            if (topic, partition) in assigned:
                consumer.seek(topic, partition, offset)
        try:
            # a crash right after still restarts from the retransmission date
            consumer.commit(offsets, self._notes(offsets, {}))
        except Exception:
            log.warning("committing retransmission offsets of %s failed", self._name, exc_info=True)
        self._loop.call_soon_threadsafe(self._flow.moved, self.generation)
        log.info("retransmission of %s from %s", self._name, offsets)

    def _hand_over(self, consumer: BrokerConsumer, partitions: list[Partition]) -> None:
        """Called by librdkafka (on this thread) when ``partitions`` are revoked, before another member reads them
        from the offsets committed here."""
        deadline = time.monotonic() + _HANDOVER_WAIT
        with self._finished:
            self._revoking.update(partitions)
            while (
                not self._stopping.is_set()
                and self._tracker.started(partitions)
                and (left := deadline - time.monotonic()) > 0
            ):
                self._finished.wait(left)
        self._commit(consumer, only=partitions, forget=True)
        with self._lock:
            self._revoking.difference_update(partitions)
        assert self._flow is not None and self._loop is not None
        # after every hand-over of what was read before: the loop runs them in order
        self._loop.call_soon_threadsafe(self._flow.revoked, set(partitions))

    def _commit_before_leaving(self, consumer: BrokerConsumer) -> None:
        """The last commit, tried again while the group rebalances (a member joining or leaving at the same time:
        Kafka refuses a commit of the generation before), polling to rejoin it. What that polling reads is not
        delivered. Given up after ``_HANDOVER_WAIT``: what was not committed is sent again by the next member."""
        deadline = time.monotonic() + _HANDOVER_WAIT
        while not self._commit(consumer, quiet=True) and time.monotonic() < deadline:
            consumer.poll(max_messages=100, timeout=0.1)
        with self._lock:
            left = self._tracker.committable()
        if left:
            log.warning("the last offsets of %s could not be committed: the next member sends them again", self._name)

    def _commit(
        self, consumer: BrokerConsumer, only: list[Partition] | None = None, forget: bool = False, quiet: bool = False
    ) -> bool:
        """Whether the offsets of what is finished are committed."""
        with self._lock:
            offsets, notes = self._to_commit()
            if only is not None:
                offsets = {p: o for p, o in offsets.items() if p in only}
        done = False
        try:
            consumer.commit(offsets, notes)
        except Exception:
            if not quiet:  # the next one tries again
                log.warning("committing offsets of %s failed", self._name, exc_info=True)
        else:
            done = True
            with self._lock:
                self._tracker.mark_committed(offsets)
                committed = self._tracker.committed()
            lag = consumer.lag(committed)
            if lag is not None:  # else the last figure stands until the next commit
                self.lag = lag
        if forget and only is not None:  # revoked: whoever reads them next starts from the last commit
            with self._lock:
                self._tracker.forget(only)
                for partition in only:
                    self._attempts.pop(partition, None)
        return done


_partition_of = operator.attrgetter("topic", "partition")
_offset_of = operator.attrgetter("offset")


def _by_partition(messages: list[Message]) -> Iterator[tuple[Partition, list[int]]]:
    """The offsets of ``messages``, in runs of one partition each (a partition may come again in a later run)."""
    for partition, run in itertools.groupby(messages, _partition_of):
        yield partition, list(map(_offset_of, run))

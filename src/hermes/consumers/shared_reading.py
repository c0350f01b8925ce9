"""Reading for every subscription of a process through one Kafka consumer (a process that runs every partition of
its subscriptions: one node, not a cluster).

A consumer of its own per subscription (a librdkafka client with its threads and buffers, and a thread of ours
polling it) cost 0.15 % of a core and 600 KiB per idle subscription: 300 of them half a core. Here one *head*
consumer reads every partition the process's subscriptions need and hands each record to every subscription in
step with it: a *lane* per partition, whose *members* are the subscriptions reading at its position (a member
skips what it has had already). A subscription that cannot take all the lane brings (its subscriber is slow, its
read-ahead is full), that starts behind the lane, or that retransmits, leaves the lanes and *catches up* through
a Kafka consumer of its own, as before, until it is back at the lanes' positions; then that consumer closes.
So a slow subscription never holds the others back, and an idle one costs a few objects.

Offsets are committed per subscription, to its consumer group, with the admin client (the group has no
members, which is what lets its offsets be set from outside): only offsets of finished messages, as before.
Lanes are created, moved and dropped only on the head's thread, so no record read before a change reaches a
member after it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hermes.broker.admin import SHARED_READER, BrokerAdmin
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.consumers.context import ConsumerContext, CrashListener
from hermes.consumers.offsets import Partition
from hermes.consumers.receiver import Flow, Receiver, _by_partition, close_bound
from hermes.consumers.retransmission import Retransmission
from hermes.domain.message import Message
from hermes.tasks import NamedThread, ended

log = logging.getLogger(__name__)

# Offsets a lane's members may all be ahead of it before the head seeks forward to them instead of reading on.
_SKIP_AHEAD = 500
# Seconds between looks at the topics' partition counts (a topic given more partitions).
_METADATA_INTERVAL = 5.0
# Seconds a starting or caught-up subscription waits for the head to create its lanes before reading on its own.
_LANES_WAIT = 2.0
# Seconds a closing receiver waits for its last commit: a broker that does not answer must not hold a shutdown
# (what was not committed comes again)
_COMMIT_WAIT = 5.0
# Offset commits the process sends per second at most (each an AlterConsumerGroupOffsets request and a write to
# Kafka's offsets log, about a tenth of the CPU of 1,000 subscriptions at 2 msg/s when each committed every
# second): beyond this many subscriptions with finished messages per commit interval, they commit in turn
# (1,000 busy subscriptions: each every 5 s; a crash repeats at most that much; Hermes commits every 60 s).
_COMMITS_PER_SECOND = 200
# Seconds a lane without members is kept (the subscription that asked for it joins it a moment later).
_EMPTY_LANE_KEPT = 1.0
# Seconds the head waits for a record while its commit round is under way, and at most at rest. A record ends the
# wait at once; what else waits on it is a new lane (created after the wait) and the next commit round, so at rest
# it wakes twice a second, not ten times (about 0.2 % of a core on a quiet machine).
_STEP_POLL = 0.1
_REST_POLL = 0.5

Handoff = tuple[Callable[[list[Message], int], None], list[Message], int]


@dataclass(eq=False)
class _Lane:
    position: int
    """The next offset the head hands over."""
    members: set[SharedReceiver] = field(default_factory=set)
    empty_since: float = field(default_factory=time.monotonic)
    """When it last had no member (a lane is dropped after ``_EMPTY_LANE_KEPT`` without one)."""


class SharedReader:
    """The head consumer and its lanes, on a thread of their own."""

    def __init__(self, context: ConsumerContext) -> None:
        self._context = context
        self.admin = BrokerAdmin(context.connection)
        self.committer = f"{SHARED_READER}{context.node_id}"  # the metadata of its commits
        self.lock = threading.Lock()  # the lanes and their members; taken before any receiver's own lock
        self._lanes: dict[Partition, _Lane] = {}
        self._wanted: collections.deque[tuple[Partition, int]] = collections.deque()  # lanes to create
        self._receivers: dict[SharedReceiver, None] = {}  # in joining order: commit rounds take turns over it
        self._commit_turn = 0
        self._stopping = threading.Event()
        self._woken = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ends: dict[Partition, int] = {}  # each lane's end, read from the head once per commit round
        self.ends_moved = 0  # counts the commit rounds whose ends differed from the round before's

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = NamedThread(target=self._run, name="shared-reader", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Ends the head's thread (its receivers closed before): one whose Kafka consumer does not close is left
        behind (as a receiver's), with the admin client it may be using."""
        self._stopping.set()
        self._woken.set()
        if await ended(self._thread, close_bound(self._context), "the shared Kafka reader"):
            await asyncio.to_thread(self.admin.close)

    def receiver(
        self, name: str, topic: str, group_id: str, context: ConsumerContext, on_crash: CrashListener
    ) -> SharedReceiver:
        return SharedReceiver(self, name, topic, group_id, context, on_crash)

    # --- called by receivers, on any thread ---

    def register(self, receiver: SharedReceiver) -> None:
        with self.lock:
            self._receivers[receiver] = None

    def unregister(self, receiver: SharedReceiver) -> None:
        with self.lock:
            self._receivers.pop(receiver, None)
            self._leave(receiver)

    def try_join(self, receiver: SharedReceiver, offsets: dict[Partition, int]) -> bool | None:
        """Makes ``receiver`` a member of the lanes of ``offsets``' partitions if it is at or ahead of each of
        them: True. False when it is behind one (it must catch up); None when lanes were missing (asked for: try
        again in a moment)."""
        with self.lock:
            missing = [p for p in offsets if p not in self._lanes]
            if missing:
                self._wanted.extend((p, offsets[p]) for p in missing)
                self._woken.set()
                return None
            if any(offsets[p] < self._lanes[p].position for p in offsets):
                return False
            for partition in offsets:
                self._lanes[partition].members.add(receiver)
            receiver.in_lanes = True
            return True

    def pull_out(self, receiver: SharedReceiver) -> bool:
        """Takes ``receiver`` out of the lanes: whether it was in them (its own reading must start)."""
        with self.lock:
            return self._leave(receiver)

    def _leave(self, receiver: SharedReceiver) -> bool:
        was_in = receiver.in_lanes
        for lane in self._lanes.values():
            lane.members.discard(receiver)
        receiver.in_lanes = False
        return was_in

    # --- the head's thread ---

    def _run(self) -> None:
        while not self._stopping.is_set():
            consumer: BrokerConsumer | None = None
            try:
                consumer = self._head_consumer()
                self._read(consumer)
            except Exception:
                # the lanes keep their positions: a new head consumer reads on from them a moment later
                log.exception("the shared Kafka reader failed; it reads on in a second")
                self._stopping.wait(1.0)
            finally:
                if consumer is not None:
                    consumer.close()

    def _head_consumer(self) -> BrokerConsumer:
        c = self._context
        consumer = BrokerConsumer(c.connection, f"hermes-reader-{c.node_id}", fetch_wait_ms=c.fetch_wait_ms)
        with self.lock:
            positions = {partition: lane.position for partition, lane in self._lanes.items()}
        if positions:
            consumer.add_partitions(positions)
        return consumer

    def _read(self, consumer: BrokerConsumer) -> None:
        c = self._context
        last_commit = last_metadata = last_step = time.monotonic()
        round_receivers: list[SharedReceiver] = []  # the commit round's, asked in turn
        to_ask = sends_left = 0  # receivers the round has still to ask, and commits it may still send
        while not self._stopping.is_set():
            self._change_lanes(consumer, realign=time.monotonic() - last_commit >= c.commit_interval)
            wait = _STEP_POLL if to_ask and sends_left else self._rest_wait(last_commit)
            if self._lanes:
                messages = consumer.poll(max_messages=500, timeout=wait)
                if messages:
                    self._dispatch(messages)
            else:
                self._woken.wait(wait)  # a subscription asking for a lane wakes it
                self._woken.clear()
            now = time.monotonic()
            if now - last_commit >= c.commit_interval:
                last_commit = now
                with self.lock:
                    partitions = list(self._lanes)
                ends = consumer.ends(partitions)  # for the receivers' lag: one look per lane, not per member
                if ends != self._ends:
                    self._ends, self.ends_moved = ends, self.ends_moved + 1
                round_receivers = self._registered()
                to_ask, sends_left = len(round_receivers), max(1, round(_COMMITS_PER_SECOND * c.commit_interval))
            if to_ask and sends_left:
                # the round's commits spread over its interval, a share after each read: sent at once, 200 of them
                # held this thread, and the records it hands over, for tens of milliseconds every interval
                step = min(sends_left, max(1, round(_COMMITS_PER_SECOND * (now - last_step))))
                self._commit_turn, asked, sent = commit_in_turn(round_receivers, self._commit_turn, step, to_ask)
                to_ask, sends_left = to_ask - asked, sends_left - sent
            last_step = now
            if now - last_metadata >= _METADATA_INTERVAL:
                last_metadata = now
                self._look_for_new_partitions(consumer)

    def _rest_wait(self, last_commit: float) -> float:
        """Until just after the next commit round is due (a wait's end rounded down would leave the round to one
        more wake-up), within ``_REST_POLL``."""
        due = last_commit + self._context.commit_interval - time.monotonic()
        return min(max(due, 0.0) + 0.01, _REST_POLL)

    def ends(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        """The partitions' ends as the head last fetched them (those it reads), as of the last commit round."""
        ends = self._ends
        return {p: ends[p] for p in partitions if p in ends}

    def _registered(self) -> list[SharedReceiver]:
        with self.lock:
            return list(self._receivers)

    def _change_lanes(self, consumer: BrokerConsumer, realign: bool) -> None:
        """Creates the lanes asked for, drops those without members for a while and (when ``realign``) moves
        those whose members are all far ahead."""
        now = time.monotonic()
        with self.lock:
            added: dict[Partition, int] = {}
            while self._wanted:
                partition, offset = self._wanted.popleft()
                if partition not in self._lanes:
                    self._lanes[partition] = _Lane(offset)
                    added[partition] = offset
            for lane in self._lanes.values():
                if lane.members:
                    lane.empty_since = now
            dropped = [p for p, lane in self._lanes.items() if now - lane.empty_since > _EMPTY_LANE_KEPT]
            for partition in dropped:
                del self._lanes[partition]
            moved: dict[Partition, int] = {}
            for partition, lane in self._lanes.items() if realign else ():
                if lane.members:
                    lowest = min(r.next_offset(partition) for r in lane.members)
                    if lowest > lane.position + _SKIP_AHEAD:
                        lane.position = moved[partition] = lowest
        if dropped:
            consumer.remove_partitions(dropped)
        if added:
            consumer.add_partitions(added)
        for (topic, number), offset in moved.items():
            consumer.seek(topic, number, offset)

    def _dispatch(self, messages: list[Message]) -> None:
        """Hands each run of one partition to every member of its lane in one pass, and all of it to the loop in one
        call: what the members share (the run's offsets and bytes) is worked out once, not per member."""
        handoffs: list[Handoff] = []
        behind: list[SharedReceiver] = []
        with self.lock:
            for partition, messages_of_run in _runs(messages):
                lane = self._lanes.get(partition)
                if lane is None:
                    continue
                run = _Run(messages_of_run)
                lane.position = run.last + 1
                left = [r for r in lane.members if not r.offer(partition, run, handoffs)]
                for receiver in left:  # before the next run: a later run of its partition must not skip what it left
                    self._leave(receiver)
                behind += left
        if handoffs:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(_hand_over, handoffs)
        for receiver in behind:
            receiver.read_on_its_own()

    def _look_for_new_partitions(self, consumer: BrokerConsumer) -> None:
        counts = consumer.partition_counts()
        for receiver in self._registered():
            count = counts.get(receiver.topic)
            if count is not None and count > receiver.partition_count():
                receiver.partitions_added()


def _hand_over(handoffs: list[Handoff]) -> None:
    for receive, messages, generation in handoffs:
        receive(messages, generation)


class Committing(Protocol):
    def commit(self) -> bool: ...


def commit_in_turn(
    receivers: Sequence[Committing], turn: int, budget: int, visits: int | None = None
) -> tuple[int, int, int]:
    """Asks ``receivers`` to commit, from the ``turn``-th on and round, until ``budget`` of them sent a commit or
    ``visits`` of them (by default all) were asked: the turn the next ask starts at (where this one stopped, so that
    every receiver's turn comes), how many were asked and how many sent a commit."""
    count = len(receivers)
    limit = count if visits is None else min(visits, count)
    sent = 0
    for step in range(limit):
        if sent == budget:
            return (turn + step) % count, step, sent
        if receivers[(turn + step) % count].commit():
            sent += 1
    return ((turn + limit) % count if count else 0), limit, sent


class _Run:
    """One partition's records of a read, in order, with what every member taking them whole needs of them."""

    __slots__ = ("first", "last", "messages", "offsets", "size")

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.offsets = [m.offset for m in messages]
        self.first = self.offsets[0]
        self.last = self.offsets[-1]
        self.size = sum(len(m.body) for m in messages)


def _runs(messages: list[Message]) -> Iterator[tuple[Partition, list[Message]]]:
    """``messages`` in runs of one partition each, in order."""
    start = 0
    for index in range(1, len(messages) + 1):
        first = messages[start]
        if (
            index == len(messages)
            or messages[index].partition != first.partition
            or messages[index].topic != first.topic
        ):
            yield (first.topic, first.partition), messages[start:index]
            start = index


class SharedReceiver(Receiver):
    """A subscription's receiver on a ``SharedReader``: a member of its lanes, or reading on its own (a thread and
    a Kafka consumer of its own) while it catches up."""

    def __init__(
        self,
        reader: SharedReader,
        name: str,
        topic: str,
        group_id: str,
        context: ConsumerContext,
        on_crash: CrashListener,
    ) -> None:
        super().__init__(name, topic, group_id, context, on_crash)
        self._reader = reader
        self.topic = topic
        self.in_lanes = False  # under the reader's lock
        self._next: dict[Partition, int] = {}  # per partition, the next offset to read; under self._lock
        self._refresh = threading.Event()  # the topic has more partitions than _next
        self._committing = False  # an asynchronous commit is under way (the next waits for it)
        # (tracker changes, reader's ends_moved) when it last had nothing to commit and its lag was measured: while
        # both stay, a commit round passes it by (at rest, a thousand of them cost a core's 1.5 % every second)
        self._at_rest: tuple[int, int] | None = None

    def start(self, flow: Flow) -> None:
        self._loop = asyncio.get_running_loop()
        self._flow = flow
        self._reader.register(self)
        self.read_on_its_own()

    def next_offset(self, partition: Partition) -> int:
        with self._lock:
            return self._next.get(partition, 0)

    def partition_count(self) -> int:
        with self._lock:
            return len(self._next)

    def partitions_added(self) -> None:
        self._refresh.set()
        if self._reader.pull_out(self):
            self.read_on_its_own()

    def seek(self, request: Retransmission) -> None:
        super().seek(request)
        if self._reader.pull_out(self):
            self.read_on_its_own()

    async def close(self) -> None:
        """Commits what is finished: also when its own Kafka thread, stuck, is left behind (it only reads)."""
        self.stop_reading()
        self._closing.set()
        self._reader.unregister(self)
        await ended(self._thread, close_bound(self._context), f"the catching-up Kafka consumer of {self._name}")
        await asyncio.to_thread(self._commit_now)

    # --- in the lanes: called by the head's thread under the reader's lock ---

    def offer(self, partition: Partition, run: _Run, handoffs: list[Handoff]) -> bool:
        """Takes what it has not had of ``run`` as far as it has room: whether it took all (if not, it reads on its own
        from where it stopped). Called for every member for every record: the usual case, the whole run fitting,
        takes nothing per message."""
        flow = self._flow
        assert flow is not None
        capacity, budget = flow.bounds()
        with self._lock:
            if self._stopping.is_set():
                return True  # closing: it leaves the lanes in a moment
            first = self._next[partition]
            if run.last < first:
                return True
            room = capacity - self._tracker.inflight()
            if run.first >= first and room >= len(run.offsets) and (budget is None or budget >= run.size):
                fresh = taken = run.messages
                offsets, size = run.offsets, run.size
            else:
                fresh = [m for m in run.messages if m.offset >= first]
                taken = fresh[: max(room, 0)]
                if budget is not None:
                    taken = _within(taken, budget)
                offsets, size = [m.offset for m in taken], sum(len(m.body) for m in taken)
            if taken:
                self._tracker.read(partition, offsets)
                self._next[partition] = offsets[-1] + 1
                generation = self.generation
        if taken:
            flow.read(taken, size)
            handoffs.append((flow.receive, taken, generation))
        return len(taken) == len(fresh)

    # --- reading on its own ---

    def read_on_its_own(self) -> None:
        """Starts this receiver's own thread (it left the lanes or never was in them)."""
        if self._closing.is_set():
            return
        # A thread of its own before this one has joined the lanes and is ending (at most closing its consumer)
        self._thread = NamedThread(target=self._read_alone, name=f"consumer-{self._name}", daemon=True)
        self._thread.start()

    def _read_alone(self) -> None:
        try:
            consumer: BrokerConsumer | None = None
            at_the_end = True  # as far as it knows: it tries to join the lanes first
            try:
                while not self._closing.is_set():
                    if self._refresh.is_set() or not self._next:
                        self._refresh.clear()
                        self._find_offsets()
                        if consumer is not None:  # assigned anew, with the new partitions
                            consumer.close()
                            consumer = None
                    if self._seek_to is not None:
                        self._apply_seek(consumer)
                    if at_the_end and self._join(wait=consumer is None):
                        return
                    if consumer is None:
                        consumer = self._own_consumer()
                    at_the_end = self._read_some(consumer)
            finally:
                if consumer is not None:
                    consumer.close()
        except Exception as exc:
            self._crashed(exc)

    def _find_offsets(self) -> None:
        """The group's committed offsets; the beginning of a partition it has none of (a new partition, a wiped
        cluster)."""
        admin = self._reader.admin
        committed_with_notes = admin.committed(self._group_id, self._topic)
        committed = {p: offset for p, (offset, _) in committed_with_notes.items()}
        for p, (_, metadata) in committed_with_notes.items():
            if (retransmitted := self.noted((self._topic, p), metadata)) is not None:
                committed[p] = retransmitted
        partitions = admin.partitions(self._topic)
        missing = [p for p in partitions if p not in committed]
        beginning = admin.beginning_offsets(self._topic) if missing else {}
        with self._lock:
            new = {
                (self._topic, p): committed[p] if p in committed else beginning.get(p, 0)
                for p in partitions
                if (self._topic, p) not in self._next
            }
            self._next.update(new)
        self._commit_now(new)  # the same offsets, now with this node as their committer (consumer-groups)

    def _join(self, wait: bool) -> bool:
        """Joins the lanes when at or ahead of them all (and not about to be full), waiting a moment for lanes the
        head has not created yet when ``wait``."""
        assert self._flow is not None
        limits = self._flow.limits()
        deadline = time.monotonic() + (_LANES_WAIT if wait else 0.0)
        while not self._closing.is_set() and self._seek_to is None:
            with self._lock:
                if limits.capacity - self._tracker.inflight() < min(limits.refill_at, limits.capacity):
                    return False
                offsets = dict(self._next)
            joined = self._reader.try_join(self, offsets)
            if joined is not None or time.monotonic() > deadline:
                return bool(joined)
            time.sleep(0.02)
        return False

    def _own_consumer(self) -> BrokerConsumer:
        c = self._context
        consumer = BrokerConsumer(c.connection, f"hermes-catch-up-{c.node_id}", fetch_wait_ms=c.fetch_wait_ms)
        with self._lock:
            consumer.assign(self._next)
        return consumer

    def _read_some(self, consumer: BrokerConsumer) -> bool:
        """One read of its own, when it has room (as a group member's receiver reads): whether it read nothing,
        being at the end of what the partitions hold."""
        assert self._flow is not None and self._loop is not None
        limits, room, generation, full = self._room()
        budget = limits.byte_budget
        if full:
            self._woken.wait(0.05)
            self._waiting = False
            self._woken.clear()
            return False
        messages = consumer.poll(max_messages=min(room, 500), timeout=0.1, max_bytes=budget)
        if not messages:
            return True
        with self._lock:
            if generation != self.generation:
                return False
            for partition, offsets in _by_partition(messages):
                self._tracker.read(partition, offsets)
                self._next[partition] = offsets[-1] + 1
        self._flow.read(messages)
        self._loop.call_soon_threadsafe(self._flow.receive, messages, generation)
        return False

    def _apply_seek(self, consumer: BrokerConsumer | None) -> None:
        assert self._flow is not None and self._loop is not None
        offsets = self._seeking()
        with self._lock:
            self.generation += 1
            self._tracker.forget(list(self._tracker.partitions()))
            self._attempts.clear()
            self._next.update(offsets)
        if consumer is not None:
            for (topic, partition), offset in offsets.items():
                consumer.seek(topic, partition, offset)
        self._commit_now(offsets)  # a crash right after still restarts from the retransmission date
        self._loop.call_soon_threadsafe(self._flow.moved, self.generation)
        log.info("retransmission of %s from %s", self._name, offsets)

    # --- commits ---

    def commit(self) -> bool:
        """Commits what is finished, asynchronously (the head's thread calls it in its commit rounds): whether it
        sent a commit."""
        if self._closing.is_set():
            return False  # its round began before it closed; closing commits what it finished
        state = (self._tracker.changes, self._reader.ends_moved)
        with self._lock:
            if self._committing or (state == self._at_rest and not self._noted):
                return False
            offsets, notes = self._to_commit()
            if not offsets:
                committed = self._tracker.committed()
            else:
                self._committing = True
        if not offsets:
            if self._measure_lag(committed):  # messages may have come that it has not finished
                self._rests(state)
            return False

        def done(error: Exception | None) -> None:
            with self._lock:
                self._committing = False
                if error is None:
                    self._tracker.mark_committed(offsets)
                    committed = self._tracker.committed()
            if error is not None:
                log.warning("committing offsets of %s failed: %s", self._name, error)
            elif self._measure_lag(committed):
                self._rests(state)

        try:
            self._reader.admin.set_group_offsets(self._group_id, offsets, self._reader.committer, done, notes)
        except Exception as exc:
            done(exc)
        return True

    def _rests(self, state: tuple[int, int]) -> None:
        """Nothing was left to commit as of ``state``, and the lag was measured: rounds pass it by until it moves."""
        with self._lock:
            self._at_rest = state

    def _measure_lag(self, committed: dict[Partition, int]) -> bool:
        """``lag``: messages after the committed offsets, up to the ends the head last fetched; False when the head
        has not fetched them all (the last figure stands until the next commit interval)."""
        ends = self._reader.ends(committed)
        if len(ends) != len(committed):
            return False
        self.lag = sum(max(0, ends[p] - offset) for p, offset in committed.items())
        return True

    def _commit_now(self, offsets: dict[Partition, int] | None = None) -> None:
        """Commits ``offsets`` (by default what is finished) and waits for it."""
        if offsets is None:
            with self._lock:
                offsets, notes = self._to_commit()
        else:
            notes = self._notes(offsets, {})
        if not offsets:
            return
        finished = threading.Event()
        failure: list[Exception] = []

        def done(error: Exception | None) -> None:
            if error is not None:
                failure.append(error)
            finished.set()

        try:
            self._reader.admin.set_group_offsets(self._group_id, offsets, self._reader.committer, done, notes)
        except Exception as exc:
            done(exc)
        finished.wait(_COMMIT_WAIT)
        if failure or not finished.is_set():
            log.warning("committing offsets of %s failed: %s", self._name, failure[0] if failure else "timed out")
        else:
            with self._lock:
                self._tracker.mark_committed(offsets)
                self._at_rest = None  # the next round measures its lag from these

    def _crashed(self, error: Exception) -> None:
        log.error("Kafka reading of %s failed", self._name, exc_info=error)
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._on_crash, error)


def _within(messages: list[Message], budget: int) -> list[Message]:
    """The first of ``messages`` whose bodies fit ``budget`` bytes (at least one while any budget is left)."""
    if budget <= 0:
        return []
    total = 0
    for index, message in enumerate(messages):
        total += len(message.body)
        if total > budget and index > 0:
            return messages[:index]
    return messages

"""SERIAL delivery: each message is pushed on its own, up to ``inflightSize`` at once, in any order.

Messages read beyond the inflightSize window wait in a bounded buffer on the loop (``read_ahead.py``;
``--consumer-read-ahead-messages`` and ``-bytes``) so the next delivery starts the moment one ends; they count as
unfinished, so their offsets are not committed before they are delivered. A retransmission cancels the deliveries
of the generation before it.

With ``ordering: KEY`` a message starts only when no earlier message with its key is unfinished: one taken from
the read-ahead while its key is busy is held back behind that key (still unfinished, so still bounding what is
read, and still counted in the read-ahead's bytes), and starts when the key's delivery ends. A message without a
key is its own key.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from hermes.consumers.context import CrashListener
from hermes.consumers.delivery import Delivery
from hermes.consumers.key_order import KeyOrder
from hermes.consumers.offsets import Partition
from hermes.consumers.read_ahead import ReadAhead
from hermes.consumers.receiver import Limits, Receiver
from hermes.consumers.retry import retry_until_ttl
from hermes.consumers.sender.result import SendResult
from hermes.domain.message import Message
from hermes.domain.subscription import Ordering, Subscription
from hermes.domain.trace import TraceStatus
from hermes.errors import UndeliverableMessage

log = logging.getLogger(__name__)


class SerialConsumer:
    def __init__(self, delivery: Delivery, receiver: Receiver, on_crash: CrashListener) -> None:
        self._delivery = delivery
        self._receiver = receiver
        self._on_crash = on_crash
        self.read_ahead = ReadAhead(delivery.context.read_ahead_messages, delivery.context.read_ahead_bytes)
        # deliveries, with the generation of their message and the key they hold (ordering: KEY)
        self._tasks: dict[asyncio.Task[None], tuple[int, bytes | None]] = {}
        self._key_order = KeyOrder()  # with ordering: KEY
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None  # kept: get_running_loop costs a getpid system call
        self._sized_for: Subscription | None = None  # the subscription ``_capacity`` was computed for
        self._capacity = 0
        self._done_callback = self._delivery_done  # one bound method, not one made for every delivery

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._receiver.start(self)

    async def stop(self, drain_timeout: float) -> None:
        """Lets deliveries that are sending finish for a moment. Deliveries cut short, or waiting for a retry or
        a rate slot, stay unfinished: their messages come again after a restart. (Waiting for those would hold a
        failing subscription's stop for the whole timeout.)"""
        self._stopping = True
        deadline = time.monotonic() + drain_timeout
        while (sending := [t for t in self._tasks if not self._delivery.waiting(t)]) and time.monotonic() < deadline:
            await asyncio.wait(sending, timeout=0.05)  # short: a delivery may go from sending to waiting
        for task in list(self._tasks):
            task.cancel()
        self.read_ahead.clear()  # unfinished, so never committed: they come again after a restart
        self._drop_held(lambda message, generation: True)

    # --- the receiver's flow ---

    def limits(self) -> Limits:
        capacity, budget = self.bounds()
        return Limits(capacity, self.read_ahead.refill_at, budget, self._delivery.failing)

    def bounds(self) -> tuple[int, int | None]:
        subscription = self._delivery.subscription
        if subscription is not self._sized_for:  # an update is a new Subscription: computed again only then
            self._sized_for = subscription
            self._capacity = subscription.serial_policy.inflight_limit + self.read_ahead.messages
        return self._capacity, self.read_ahead.byte_budget()

    def read(self, messages: list[Message], size: int | None = None) -> None:
        self.read_ahead.count(messages, size)

    def receive(self, messages: list[Message], generation: int) -> None:
        if generation != self._receiver.generation:
            self.read_ahead.uncount(messages)
            return
        self.read_ahead.add(messages, generation)
        self._start_deliveries()

    def moved(self, generation: int) -> None:
        for task, (task_generation, _) in list(self._tasks.items()):
            if task_generation < generation:
                task.cancel()
        self.read_ahead.drop_older_than(generation)
        self._drop_held(lambda message, g: g < generation)

    def revoked(self, partitions: set[Partition]) -> None:
        """Deliveries under way finish (the hand-over waited for them or gave up); what waits is dropped."""
        self.read_ahead.drop_partitions(partitions)
        self._drop_held(lambda message, _: (message.topic, message.partition) in partitions)

    # --- deliveries ---

    def _start_deliveries(self) -> None:
        """Starts buffered messages while fewer than inflightSize deliveries run; wakes the receiver when enough
        room is free. Messages of an older generation or of a revoked partition are dropped."""
        policy = self._delivery.subscription.serial_policy
        by_key = policy.ordering is Ordering.KEY
        key_order = self._key_order
        while len(self._tasks) < policy.inflight_limit and not self._stopping:
            key: bytes | None = None  # the key this delivery holds
            if item := key_order.ready():
                self.read_ahead.uncount((item[0],))
                key = item[0].key
            elif item := self.read_ahead.take():
                if by_key and (key := item[0].key) is not None and key_order.hold(item, key):
                    self.read_ahead.count((item[0],))  # held, its bytes still count
                    continue
            else:
                break
            message, generation = item
            if not self._receiver.take(message, generation):
                if key is not None:
                    key_order.release(key)
                continue
            assert self._loop is not None  # started
            task = self._loop.create_task(self._deliver(message, generation))
            self._tasks[task] = generation, key
            task.add_done_callback(self._done_callback)
        if self.read_ahead.low():
            self._receiver.wake()

    def _drop_held(self, void: Callable[[Message, int], bool]) -> None:
        self.read_ahead.uncount(self._key_order.drop(void))

    def _delivery_done(self, task: asyncio.Task[None]) -> None:
        _, key = self._tasks.pop(task)
        if key is not None:
            self._key_order.release(key)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("delivery of %s crashed", self._delivery.name, exc_info=error)
            self._on_crash(error)
        self._start_deliveries()

    async def _deliver(self, message: Message, generation: int | None) -> None:
        """Delivers until success, a final failure or the TTL, then finishes the message (``generation`` None: a
        message from outside the topic's reading, with nothing to finish). A cancelled delivery stays unfinished,
        so its offset is never committed and the message comes again after a restart. (One coroutine from the
        task to the retries: each level is resumed again by every answer.)"""
        started = time.monotonic()  # messageTtl counts from here
        delivery = self._delivery
        # most messages are not offloaded: no coroutine to resolve them (nor, below, for a schema or filters)
        resolved = message if message.external_url is None else await delivery.resolve(message)
        if resolved is not None:
            try:
                schema = None if resolved.schema_version is None else await delivery.schema(resolved)
                if not delivery.filtered or await delivery.passes(resolved, schema):
                    delivery.trace(resolved, TraceStatus.INFLIGHT)
                    if delay := delivery.subscription.serial_policy.sending_delay / 1000:
                        # counted from publishing, so a backlog of older messages goes at once; never longer than
                        # the delay itself, whatever the publishing node's clock said
                        await asyncio.sleep(min(delay, resolved.publish_timestamp / 1000 + delay - time.time()))
                    send = functools.partial(self._send, resolved, schema)
                    earlier = self._receiver.attempts(resolved)
                    try:
                        await retry_until_ttl(delivery, [resolved], started, send, paced=True, attempts=earlier)
                    except UndeliverableMessage as exc:  # no retry can convert it
                        await delivery.discard([resolved], exc.message)
            finally:
                if resolved.stored is not None:
                    delivery.finished([resolved])
        if generation is not None:
            self._receiver.finish(message, generation)

    async def redeliver(self, messages: list[Message]) -> None:
        """Delivers messages from outside the topic's reading (a redrive): the same way, each on its own, with
        nothing to finish in the topic's offsets."""
        for message in messages:
            await self._deliver(message, None)

    async def unpark(self, message: Message, attempts: int, started: float) -> None:
        """Delivers a parked message, now due, after its ``attempts`` so far (its filters were passed before it
        was parked). Returns once it is finished: delivered, discarded or parked again."""
        delivery = self._delivery
        resolved = await delivery.resolve(message)
        if resolved is None:
            return
        delivery.metrics.count("unparked")
        try:
            send = functools.partial(self._send, resolved, await delivery.schema(resolved))
            try:
                await retry_until_ttl(delivery, [resolved], started, send, paced=True, attempts=attempts)
            except UndeliverableMessage as exc:
                await delivery.discard([resolved], exc.message)
        finally:
            delivery.finished([resolved])

    async def _send(
        self, message: Message, schema: str | None, subscription: Subscription, url: str, retries: int
    ) -> SendResult:
        content = self._delivery.context.content
        body, content_type, extra = content.body(subscription, message, schema)
        headers = self._delivery.context.sender.headers(subscription, message, retries, content_type)
        if extra:  # a CloudEvent's or an Avro body's: most messages have none, and need no copy
            headers.update(extra)
        result = await self._delivery.context.sender.send(
            subscription, url, body, headers, subscription.serial_policy.request_timeout
        )
        if not result.succeeded:
            self._receiver.failed(message, retries + 1)
        return result

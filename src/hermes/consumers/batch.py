"""BATCH delivery: messages are aggregated into a JSON array and sent as one request.

A batch is sent when it holds ``batchSize`` messages, its bodies reach ``batchVolume`` bytes, or ``batchTime``
ms passed since its first message, whichever comes first. One batch is in flight at a time, so batches (and
the messages of every partition) arrive in order; the next one is collected meanwhile. A batch is retried as a
whole with the batch policy; its offsets are finished only when it was delivered or discarded. A single message
larger than ``batchVolume`` is sent alone rather than dropped. Messages of Avro topics are filtered as records
and sent as JSON; a JSON topic's body that is not JSON goes in as a JSON string of its text, so a batch is always
JSON; a CloudEvents topic's batch is ``application/cloudevents-batch+json``, its events in the JSON format. An
offloaded message's body is streamed into the batch from its file; when the body budget has no room for the next
one, the batch goes as it is (its own bodies may be what fills the budget). Messages are
taken as the receiver read them, a read at a time: one of JSON held in Kafka for a subscription without filters
is taken and added in bulk (one lock, set operations per partition), any other one message at a time.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
import logging
import operator
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat

import orjson

from hermes.consumers.content import JSON
from hermes.consumers.context import CrashListener
from hermes.consumers.delivery import Delivery
from hermes.consumers.offsets import Partition
from hermes.consumers.receiver import Limits, Receiver
from hermes.consumers.retry import retry_until_ttl
from hermes.consumers.sender.result import SendResult
from hermes.domain.cloudevents import BATCH as CLOUD_EVENTS_BATCH
from hermes.domain.message import BATCH_ID_HEADER, MESSAGE_ID_HEADER, Message, new_message_id
from hermes.domain.subscription import Subscription
from hermes.domain.trace import TraceStatus
from hermes.errors import UndeliverableMessage
from hermes.http.streamed import Body, FileRegion, StreamedBody

log = logging.getLogger(__name__)

MESSAGE_IDS_HEADER = "Hermes-Message-Ids"


@dataclass
class Batch:
    started: float  # messageTtl counts from here
    messages: list[Message] = field(default_factory=list)
    generations: list[int] = field(default_factory=list)  # the generation each message was read in
    bodies: list[Body] = field(default_factory=list)  # as the subscriber gets them
    volume: int = 0
    streamed: bool = False  # some body is streamed from a file

    def add(self, message: Message, generation: int, body: Body) -> None:
        self.add_all([message], generation, [body], _size(body))

    def add_all(self, messages: list[Message], generation: int, bodies: Sequence[Body], volume: int) -> None:
        self.messages += messages
        self.generations += repeat(generation, len(messages))
        self.bodies += bodies
        self.volume += volume
        self.streamed = self.streamed or not all(isinstance(body, bytes) for body in bodies)

    def keep(self, pending: list[bool]) -> list[Message]:
        """Drops the messages that are no longer ``pending``; returns them."""
        if all(pending):
            return []
        dropped = [message for message, still in zip(self.messages, pending, strict=True) if not still]
        kept = [i for i, still in enumerate(pending) if still]
        self.messages = [self.messages[i] for i in kept]
        self.generations = [self.generations[i] for i in kept]
        self.bodies = [self.bodies[i] for i in kept]
        self.volume = sum(map(_size, self.bodies))
        return dropped

    @property
    def body(self) -> Body:
        if not self.streamed:
            return b"[" + b",".join(self.bodies) + b"]"  # type: ignore[arg-type]
        parts: list[bytes | FileRegion] = [b"["]
        for body in self.bodies:
            if len(parts) > 1:
                parts.append(b",")
            parts.extend(body.parts if isinstance(body, StreamedBody) else (body,))
        parts.append(b"]")
        return StreamedBody(tuple(parts))


class BatchConsumer:
    def __init__(self, delivery: Delivery, receiver: Receiver, on_crash: CrashListener) -> None:
        self._delivery = delivery
        self._receiver = receiver
        self._on_crash = on_crash
        # what was read, in the receiver's reads with their generation, in order; taken without awaiting while
        # anything is there
        self._arrived: deque[tuple[list[Message], int]] = deque()
        self._more = asyncio.Event()  # set when messages arrive
        self._batcher: asyncio.Task[None] | None = None
        self._delivered_at = 0.0  # when the last batch was done with (monotonic)

    def start(self) -> None:
        self._receiver.start(self)
        self._batcher = asyncio.create_task(self._run_batches(), name=f"batches-{self._delivery.name}")
        self._batcher.add_done_callback(self._batcher_done)

    async def stop(self, drain_timeout: float) -> None:
        """An unfinished batch stays uncommitted: it comes again after a restart."""
        if self._batcher is not None:
            self._batcher.cancel()
            await asyncio.wait([self._batcher])

    def _batcher_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("batching of %s crashed", self._delivery.name, exc_info=error)
            self._on_crash(error)

    # --- the receiver's flow ---

    def limits(self) -> Limits:
        # bounded by three batch sizes (one batch sent, one collected, one waiting to be collected; a batch itself
        # stops at batchVolume): no byte budget. Read again only when a whole batch fits: fewer, larger reads (each
        # is a hand-over between the Kafka thread and the loop), and the next batch is there to collect at once.
        size = self._delivery.subscription.batch_policy.batch_size
        return Limits(capacity=3 * size, refill_at=size)

    def bounds(self) -> tuple[int, int | None]:
        return 3 * self._delivery.subscription.batch_policy.batch_size, None

    def read(self, messages: list[Message], size: int | None = None) -> None:
        """Nothing to count: the capacity bounds what waits in the queue."""

    def receive(self, messages: list[Message], generation: int) -> None:
        self._arrived.append((messages, generation))
        self._more.set()

    def moved(self, generation: int) -> None:
        """Nothing to cancel: queued messages of older generations are dropped as they are collected."""

    def revoked(self, partitions: set[Partition]) -> None:
        """Queued messages of those partitions are dropped; a batch collected or sent goes on."""
        arrived: deque[tuple[list[Message], int]] = deque()
        for messages, generation in self._arrived:
            kept = [message for message in messages if (message.topic, message.partition) not in partitions]
            self._delivery.finished(message for message in messages if (message.topic, message.partition) in partitions)
            if kept:
                arrived.append((kept, generation))
        self._arrived = arrived

    # --- batches ---

    async def _run_batches(self) -> None:
        # The next batch is collected while the previous one is sent: the per-message work of collecting
        # overlaps the request. One batch is in flight at a time, so batches keep their order.
        sending: asyncio.Task[None] | None = None
        batch: Batch | None = None
        try:
            while True:
                batch = await self._collect()
                if sending is not None:
                    await sending
                    sending = None
                    # what a retransmission or a revocation voided during that send is dropped, as in _collect
                    self._delivery.finished(batch.keep(self._receiver.pending_all(batch.messages, batch.generations)))
                    # its messageTtl counts from when it could be sent first, as if collected only then
                    batch.started = max(batch.started, self._delivered_at)
                if batch.messages:
                    self._delivery.traces(batch.messages, TraceStatus.INFLIGHT)
                    sending = asyncio.create_task(self._deliver(batch), name=f"batch-{self._delivery.name}")
                batch = None
        finally:
            if batch is not None:  # collected, not sent
                self._delivery.finished(batch.messages)
            if sending is not None:
                sending.cancel()
                await asyncio.wait([sending])

    async def _collect(self) -> Batch:
        batch = Batch(time.monotonic())
        delivery = self._delivery
        while True:
            policy = delivery.subscription.batch_policy
            room = policy.batch_size - len(batch.messages)
            if room <= 0 or batch.volume >= policy.batch_volume:
                return batch
            if not self._arrived and not await self._more_for(batch):
                return batch
            messages, generation = self._arrived.popleft()
            if len(messages) > room:
                self._arrived.appendleft((messages[room:], generation))
                messages = messages[:room]
            taken = self._receiver.take_all(messages, generation)
            if all(taken) and delivery.plain(messages):  # in bulk: as published, no filter to pass
                bodies = [json_element(message.body) for message in messages]
                sizes = list(itertools.accumulate(map(len, bodies), initial=batch.volume))
                # the first message always goes in (one larger than batchVolume is sent alone)
                fit = max(bisect.bisect_right(sizes, policy.batch_volume) - 1, 0 if batch.messages else 1)
                batch.add_all(messages[:fit], generation, bodies[:fit], sizes[fit] - batch.volume)
                if fit < len(messages):  # they start the next batch, taken already
                    self._arrived.appendleft((messages[fit:], generation))
                    return batch
                continue
            for i, (message, take) in enumerate(zip(messages, taken, strict=True)):
                if not take:
                    delivery.finished([message])  # one put back resolved may hold a stored body
                    continue  # read before a retransmission moved the group, or its partition was revoked
                if (first := await self._add(batch, message, generation)) is not None:
                    self._arrived.appendleft(([first, *messages[i + 1 :]], generation))  # taken again
                    return batch

    async def _add(self, batch: Batch, message: Message, generation: int) -> Message | None:
        """Adds ``message`` to ``batch`` unless it is discarded or filtered out. When it starts the next batch
        instead, returns it (resolved if it could be)."""
        delivery = self._delivery
        resolved = await delivery.resolve(message, wait=not batch.messages)
        if resolved is None:
            self._receiver.finish(message, generation)
            self._receiver.wake()
            return None
        if resolved.external_url is not None:  # no room for its body: this batch goes first
            return message
        message = resolved
        schema = None if message.schema_version is None else await delivery.schema(message)
        if not await delivery.passes(message, schema):
            delivery.finished([message])
            self._receiver.finish(message, generation)
            self._receiver.wake()
            return None
        try:
            body, _, _ = delivery.context.content.body(delivery.subscription, message, schema)
        except UndeliverableMessage as exc:
            await delivery.discard([message], exc.message)
            delivery.finished([message])
            self._receiver.finish(message, generation)
            self._receiver.wake()
            return None
        if schema is None:  # a JSON topic's body, which may be anything
            if isinstance(body, bytes):
                body = json_element(body)
            else:  # stored: read from its file, off the event loop
                body = await asyncio.to_thread(_stored_json_element, message, body)
        if batch.messages and batch.volume + _size(body) > delivery.subscription.batch_policy.batch_volume:
            return message  # starts the next batch, resolved already
        batch.add(message, generation, body)
        return None

    async def redeliver(self, messages: list[Message]) -> None:
        """Delivers messages from outside the topic's reading (a redrive) as one batch, beside the batches of the
        topic, with nothing to finish in the topic's offsets."""
        batch = Batch(time.monotonic())
        delivery = self._delivery
        try:
            for message in messages:
                resolved = await delivery.resolve(message)
                if resolved is None:
                    continue
                schema = None if resolved.schema_version is None else await delivery.schema(resolved)
                if not await delivery.passes(resolved, schema):
                    delivery.finished([resolved])
                    continue
                try:
                    body, _, _ = delivery.context.content.body(delivery.subscription, resolved, schema)
                except UndeliverableMessage as exc:
                    await delivery.discard([resolved], exc.message)
                    delivery.finished([resolved])
                    continue
                if schema is None:
                    body = json_element(body) if isinstance(body, bytes) else _stored_json_element(resolved, body)
                batch.add(resolved, 0, body)
            if batch.messages:
                send = functools.partial(self._send, batch, new_message_id())
                await retry_until_ttl(delivery, batch.messages, batch.started, send, paced=False)
        finally:
            delivery.finished(batch.messages)

    async def _more_for(self, batch: Batch) -> bool:
        """Waits for messages; False when the batchTime of ``batch`` (counted from its first message) ends."""
        self._more.clear()
        if not batch.messages:
            await self._more.wait()
            batch.started = time.monotonic()
            return True
        remaining = batch.started + self._delivery.subscription.batch_policy.batch_time / 1000 - time.monotonic()
        if remaining <= 0:
            return False
        try:
            async with asyncio.timeout(remaining):
                await self._more.wait()
        except TimeoutError:
            return False
        return True

    async def _deliver(self, batch: Batch) -> None:
        try:
            send = functools.partial(self._send, batch, new_message_id())
            await retry_until_ttl(self._delivery, batch.messages, batch.started, send, paced=False)
            self._receiver.finish_all(batch.messages, batch.generations)
            self._receiver.wake()
            self._delivered_at = time.monotonic()
        finally:
            self._delivery.finished(batch.messages)  # its stored bodies' room is free for the next batch

    async def _send(
        self, batch: Batch, batch_id: str, subscription: Subscription, url: str, retries: int
    ) -> SendResult:
        # a CloudEvents topic's events go in the JSON format (hermes.consumers.content)
        content_type = JSON if batch.messages[0].cloud_event is None else CLOUD_EVENTS_BATCH
        headers = self._delivery.context.sender.headers(subscription, batch.messages[0], retries, content_type)
        headers[BATCH_ID_HEADER] = batch_id
        headers[MESSAGE_IDS_HEADER] = ",".join(map(_message_id, batch.messages))
        del headers[MESSAGE_ID_HEADER]
        return await self._delivery.context.sender.send(
            subscription, url, batch.body, headers, subscription.batch_policy.request_timeout
        )


_message_id = operator.attrgetter("message_id")


def json_element(body: bytes) -> bytes:
    """``body`` as an element of the batch's JSON array: itself when it is JSON, else a JSON string of its text
    (invalid UTF-8 replaced). A JSON topic takes any body, and ``[orderId=42&x=1,<order id="1"/>]`` is no JSON."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return orjson.dumps(body.decode("utf-8", "replace"))
    return body


def _stored_json_element(message: Message, body: Body) -> Body:
    """A stored body is streamed from its file as it is when it is JSON, else sent as a JSON string."""
    whole = message.whole_body()
    element = json_element(whole)
    return body if element is whole else element


def _size(body: Body) -> int:
    return body.size if isinstance(body, StreamedBody) else len(body)

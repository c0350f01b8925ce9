"""Publishing one message: validate, stamp a message id, produce, and wait for the ack within the timeout."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from hermes.broker.producer import BrokerProducer, DeliveryReport
from hermes.domain.avro import json_to_avro
from hermes.domain.message import (
    KAFKA_MESSAGE_ID,
    KAFKA_PROPAGATED_PREFIX,
    KAFKA_PUBLISH_TIMESTAMP,
    KAFKA_SCHEMA_VERSION,
    PARTITION_KEY_HEADER,
    SCHEMA_VERSION_HEADER,
)
from hermes.domain.topic import Ack, ContentType, Topic
from hermes.errors import HermesError, PayloadTooLarge, ValidationError
from hermes.frontend.journal import Journal, JournalEntry
from hermes.frontend.metrics import PRODUCER_ERRORS
from hermes.frontend.schemas import SchemaSource
from hermes.tracking import TraceStatus, Tracker

# A journaled message the broker refused is produced again after this many seconds.
_RESEND_DELAY = 5.0


@dataclass(frozen=True)
class PublishTimeouts:
    """How long a publish request waits for the broker's ack before answering 202 (seconds)."""

    leader: float = 0.065
    all: float = 0.4

    def for_ack(self, ack: Ack) -> float:
        return self.all if ack is Ack.ALL else self.leader


@dataclass(frozen=True)
class PublishResult:
    message_id: str
    acknowledged: bool  # False: accepted (202), the broker has not acknowledged yet


async def _settled_within(future: asyncio.Future[DeliveryReport], seconds: float) -> bool:
    """Whether ``future`` completed within ``seconds``; it is never cancelled. (One timer and one
    callback: ``wait_for(shield(...))`` costs two more futures and callbacks on every publish.)"""
    if future.done():
        return True
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[bool] = loop.create_future()

    def decide(outcome: bool) -> None:
        if not waiter.done():
            waiter.set_result(outcome)

    timer = loop.call_later(seconds, decide, False)
    future.add_done_callback(lambda _: decide(True))
    try:
        return await waiter
    finally:
        timer.cancel()


class Publisher:
    def __init__(
        self,
        producer: BrokerProducer,
        timeouts: PublishTimeouts,
        schemas: SchemaSource | None = None,
        tracker: Tracker | None = None,
        propagated_headers: frozenset[str] = frozenset(),
        journal: Journal | None = None,
    ) -> None:
        self._journal = journal
        self._producer = producer
        self._timeouts = timeouts
        self._schemas = schemas
        self._tracker = tracker
        self._propagated = frozenset(h.lower() for h in propagated_headers)

    async def _encode(self, topic: Topic, body: bytes, headers: Mapping[str, str]) -> tuple[bytes, int | None]:
        if topic.content_type is ContentType.JSON:
            try:
                orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise ValidationError(f"the message is not valid JSON: {exc}") from None
            return body, None
        if self._schemas is None:
            raise ValidationError(f"topic {topic.qualified_name} takes Avro, and no schema is available")
        requested = headers.get(SCHEMA_VERSION_HEADER)
        if requested is not None and not requested.isdigit():
            raise ValidationError("must be a schema version number", SCHEMA_VERSION_HEADER)
        version, schema = await self._schemas.get(topic.name, int(requested) if requested else None)
        return json_to_avro(schema, body), version

    async def publish(self, topic: Topic, body: bytes, headers: Mapping[str, str]) -> PublishResult:
        if len(body) > topic.max_message_size:
            raise PayloadTooLarge(
                f"Message size {len(body)} exceeds the topic's maxMessageSize {topic.max_message_size}"
            )
        value, schema_version = await self._encode(topic, body, headers)
        message_id = str(uuid.uuid4())
        kafka_headers = [
            (KAFKA_MESSAGE_ID, message_id.encode()),
            (KAFKA_PUBLISH_TIMESTAMP, str(int(time.time() * 1000)).encode()),
        ]
        if schema_version is not None:
            kafka_headers.append((KAFKA_SCHEMA_VERSION, str(schema_version).encode()))
        kafka_headers.extend(
            (KAFKA_PROPAGATED_PREFIX + name, value_.encode())
            for name, value_ in headers.items()
            if name.lower() in self._propagated
        )
        partition_key = headers.get(PARTITION_KEY_HEADER)
        tracked = self._tracker if topic.tracking_enabled else None
        if tracked is not None:
            tracked.frontend(message_id, topic.qualified_name, TraceStatus.INFLIGHT)
        ack = self._producer.send(
            topic.qualified_name,
            value,
            key=partition_key.encode() if partition_key else None,
            headers=kafka_headers,
            ack=topic.ack,
        )
        ack.add_done_callback(lambda f: self._settled(f, topic, message_id, tracked))
        if not await _settled_within(ack, self._timeouts.for_ack(topic.ack)):
            if self._journal is not None:  # kept on disk before the 202 leaves: a crash cannot lose it
                key = partition_key.encode() if partition_key else None
                entry = JournalEntry(message_id, topic.qualified_name, value, key, tuple(kafka_headers), topic.ack)
                self._journal.put(entry.message_id, entry.topic, entry.value, entry.key, entry.headers, entry.ack)
                self._watch(ack, entry)
            return PublishResult(message_id, acknowledged=False)
        ack.result()  # the broker's refusal, raised
        return PublishResult(message_id, acknowledged=True)

    def resend(self, entry: JournalEntry) -> None:
        """Produces a journaled message again (at start-up, or after the broker refused it)."""
        future = self._producer.send(entry.topic, entry.value, key=entry.key, headers=entry.headers, ack=Ack(entry.ack))
        self._watch(future, entry)

    def _watch(self, future: asyncio.Future[DeliveryReport], entry: JournalEntry) -> None:
        def settled(f: asyncio.Future[DeliveryReport]) -> None:
            if f.exception() is None:
                assert self._journal is not None
                self._journal.acknowledge(entry.message_id)
            else:
                asyncio.get_running_loop().call_later(_RESEND_DELAY, self.resend, entry)

        future.add_done_callback(settled)

    @staticmethod
    def _settled(
        future: asyncio.Future[DeliveryReport], topic: Topic, message_id: str, tracker: Tracker | None
    ) -> None:
        error = future.exception()
        if error is not None:
            PRODUCER_ERRORS.labels(topic.qualified_name).inc()
        if tracker is not None:
            reason = error.message if isinstance(error, HermesError) else None
            tracker.frontend(
                message_id, topic.qualified_name, TraceStatus.FAILED if error else TraceStatus.SUCCESS, reason
            )

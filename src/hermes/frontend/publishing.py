"""Publishing one message: validate, stamp a message id, produce, and wait for the ack within the timeout."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from hermes.broker.producer import BrokerProducer
from hermes.domain.avro import json_to_avro
from hermes.domain.message import (
    KAFKA_MESSAGE_ID,
    KAFKA_PROPAGATED_PREFIX,
    KAFKA_PUBLISH_TIMESTAMP,
    KAFKA_SCHEMA_VERSION,
    PARTITION_KEY_HEADER,
    SCHEMA_VERSION_HEADER,
    new_message_id,
)
from hermes.domain.topic import Ack, ContentType, Topic
from hermes.errors import HermesError, PayloadTooLarge, ValidationError
from hermes.frontend.acks import TIMED_OUT, AckTimeouts, AckWait
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


class PublishResult(NamedTuple):
    message_id: str
    acknowledged: bool  # False: accepted (202), the broker has not acknowledged yet


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
        self._waits = {ack: AckTimeouts(timeouts.for_ack(ack)) for ack in Ack}
        self._schemas = schemas
        self._tracker = tracker
        self._propagated = frozenset(h.lower() for h in propagated_headers)

    async def _encode_avro(self, topic: Topic, body: bytes, headers: Mapping[str, str]) -> tuple[bytes, int]:
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
        schema_version = None
        if topic.content_type is ContentType.JSON:
            try:
                orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise ValidationError(f"the message is not valid JSON: {exc}") from None
            value = body
        else:
            value, schema_version = await self._encode_avro(topic, body, headers)
        message_id = new_message_id()
        kafka_headers = [
            (KAFKA_MESSAGE_ID, message_id.encode()),
            (KAFKA_PUBLISH_TIMESTAMP, str(int(time.time() * 1000)).encode()),
        ]
        if schema_version is not None:
            kafka_headers.append((KAFKA_SCHEMA_VERSION, str(schema_version).encode()))
        if self._propagated:
            for header, header_value in headers.items():
                if header.lower() in self._propagated:
                    kafka_headers.append((KAFKA_PROPAGATED_PREFIX + header, header_value.encode()))
        partition_key = headers.get(PARTITION_KEY_HEADER)
        key = partition_key.encode() if partition_key else None
        name = topic.qualified_name
        tracker = self._tracker if topic.tracking_enabled else None
        if tracker is not None:
            tracker.frontend(message_id, name, TraceStatus.INFLIGHT)
        wait = self._waits[topic.ack].start(asyncio.get_running_loop())
        settled = functools.partial(_settled, wait, name, message_id, tracker)
        self._producer.produce(name, value, settled, key=key, headers=kafka_headers, ack=topic.ack)
        error = await wait.waiter
        if error is None:
            return PublishResult(message_id, True)
        if error is not TIMED_OUT:
            raise error
        if self._journal is not None:  # kept on disk before the 202 leaves: a crash cannot lose it
            entry = JournalEntry(message_id, name, value, key, tuple(kafka_headers), topic.ack)
            self._journal.put(entry.message_id, entry.topic, entry.value, entry.key, entry.headers, entry.ack)
            wait.hand_over(functools.partial(self._journaled_settled, entry))
        return PublishResult(message_id, False)

    def resend(self, entry: JournalEntry) -> None:
        """Produces a journaled message again (at start-up, or after the broker refused it)."""
        settled = functools.partial(self._journaled_settled, entry)
        self._producer.produce(
            entry.topic, entry.value, settled, key=entry.key, headers=entry.headers, ack=Ack(entry.ack)
        )

    def _journaled_settled(self, entry: JournalEntry, error: Exception | None) -> None:
        if error is None:
            assert self._journal is not None
            self._journal.acknowledge(entry.message_id)
        else:
            asyncio.get_running_loop().call_later(_RESEND_DELAY, self.resend, entry)


def _settled(wait: AckWait, topic: str, message_id: str, tracker: Tracker | None, error: Exception | None) -> None:
    """The broker's outcome of a publish, within its ack timeout or later: counted, traced, then handed to
    the wait. It runs inside the producer's poll, so the trace event is produced a moment later."""
    if error is not None:
        PRODUCER_ERRORS.labels(topic).inc()
    if tracker is not None:
        reason = error.message if isinstance(error, HermesError) else None
        status = TraceStatus.FAILED if error else TraceStatus.SUCCESS
        asyncio.get_running_loop().call_soon(tracker.frontend, message_id, topic, status, reason)
    wait.settled(error)

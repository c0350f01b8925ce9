"""Publishing one message: validate, produce, and answer on the broker's ack or at the ack timeout, whichever
comes first (201 or 202; ack NONE: 201 once the producer has it). No coroutine or future per publish: the broker's
outcome and the timeout call back into the message's ``_InFlight``, which answers the request.

What a topic takes, as Hermes: a JSON topic any body of any Content-Type (unless ``jsonValidationEnabled``); an
Avro topic JSON, Avro's JSON encoding (``avro/json``) or Avro binary (``avro/binary``), checked against its schema; a
CloudEvents topic CloudEvents only (``frontend/cloudevents.py``), one message per event."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

import orjson

from hermes.broker.producer import BrokerProducer
from hermes.broker.topics import KAFKA_MAX_BODY, kafka_body_limit
from hermes.domain.avro import avro_json_to_avro, check_avro, json_to_avro, schema_version
from hermes.domain.cloudevents import CloudEvent
from hermes.domain.message import (
    IDEMPOTENCY_KEY_HEADER,
    KAFKA_PROPAGATED_PREFIX,
    PARTITION_KEY_HEADER,
    SCHEMA_ID_HEADER,
    SCHEMA_VERSION_HEADER,
    kafka_headers,
)
from hermes.domain.topic import Ack, ContentType, Topic
from hermes.domain.trace import TraceStatus
from hermes.domain.trace_context import TRACEPARENT, TRACESTATE, valid_traceparent, valid_tracestate
from hermes.errors import HermesError, PayloadTooLarge, UnsupportedMediaType, ValidationError
from hermes.frontend.acks import AckTimeouts
from hermes.frontend.cloudevents import publish_events
from hermes.frontend.journal import Journal, JournalEntry
from hermes.frontend.publish_metrics import PRODUCER_ERRORS
from hermes.frontend.schemas import SchemaSource
from hermes.http.lean import SpooledBody
from hermes.offload.offloader import Offloader, placeholder_headers
from hermes.tracker import Tracker

if TYPE_CHECKING:
    from hermes.frontend.idempotency import IdempotencyKeys
    from hermes.telemetry.spans import Tracing  # imported only when tracing is on: the extra's package

# A journaled message the broker refused is produced again after this many seconds.
_RESEND_DELAY = 5.0
# Request headers arrive keyed by lower-case name.
_SCHEMA_VERSION = SCHEMA_VERSION_HEADER.lower()
_SCHEMA_ID = SCHEMA_ID_HEADER.lower()
_PARTITION_KEY = PARTITION_KEY_HEADER.lower()
_IDEMPOTENCY_KEY = IDEMPOTENCY_KEY_HEADER.lower()
_TRACEPARENT_RECORD = KAFKA_PROPAGATED_PREFIX + TRACEPARENT
_TRACESTATE_RECORD = KAFKA_PROPAGATED_PREFIX + TRACESTATE


class Format(Enum):
    """What a Content-Type says the body is."""

    JSON = "JSON"
    AVRO_JSON = "AVRO_JSON"
    AVRO_BINARY = "AVRO_BINARY"
    OTHER = "OTHER"


@functools.lru_cache(maxsize=256)  # clients send a few distinct values: a dict look-up per publish
def body_format(content_type: str) -> Format:
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in ("", "application/json", "text/plain", "*/*") or kind.endswith("+json"):
        return Format.JSON
    if kind == "avro/json":
        return Format.AVRO_JSON
    if kind == "avro/binary":
        return Format.AVRO_BINARY
    return Format.OTHER


_AVRO_ENCODERS = {Format.JSON: json_to_avro, Format.AVRO_JSON: avro_json_to_avro, Format.AVRO_BINARY: check_avro}


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
    replayed: bool = False  # a repeat of a publish with the same Idempotency-Key: nothing was produced


# Called once per publish: with the result, or with the error that refused the message.
Answer = Callable[[PublishResult | Exception], None]


class Publisher:
    def __init__(
        self,
        producer: BrokerProducer,
        timeouts: PublishTimeouts,
        schemas: SchemaSource | None = None,
        tracker: Tracker | None = None,
        propagated_headers: frozenset[str] = frozenset(),
        journal: Journal | None = None,
        offloader: Offloader | None = None,
        idempotency: IdempotencyKeys | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.journal = journal
        self._idempotency = idempotency
        self._tracing = tracing
        self._offloader = offloader
        self._producer = producer
        self._timeouts = {ack: AckTimeouts(timeouts.for_ack(ack)) for ack in (Ack.LEADER, Ack.ALL)}
        self._schemas = schemas
        self._tracker = tracker
        # as configured: the Kafka header's name; the trace context goes with every message, validated
        trace_context = (TRACEPARENT, TRACESTATE)
        self._propagated = {h.lower(): h for h in propagated_headers if h.lower() not in trace_context}
        self._avro_tasks: set[asyncio.Task[None]] = set()  # and those storing large messages

    def publish(
        self, topic: Topic, message_id: str, body: bytes | SpooledBody, headers: Mapping[str, str], answer: Answer
    ) -> None:
        """Raises what is wrong with the message; otherwise produces it, and ``answer`` gets the outcome.
        ``headers`` are the request's, keyed by lower-case name. A spooled body is read into memory only when it
        goes to Kafka itself (or must be validated, or is Avro)."""
        idempotency = self._idempotency
        if idempotency is not None and (key := headers.get(_IDEMPOTENCY_KEY)) is not None:
            idempotency.publish(self._publish, topic, message_id, body, headers, key, answer)
            return
        self._publish(topic, message_id, body, headers, answer)

    def _publish(
        self, topic: Topic, message_id: str, body: bytes | SpooledBody, headers: Mapping[str, str], answer: Answer
    ) -> None:
        if topic.cloud_events:
            publish_events(self._produce, topic, message_id, body, headers, answer)
            return
        size = body.size if isinstance(body, SpooledBody) else len(body)
        if size > kafka_body_limit(topic):
            self._offload_limit(topic, size)
            if topic.content_type is ContentType.JSON:
                self._publish_large(topic, message_id, body, headers, answer)
                return
        if isinstance(body, SpooledBody):  # an Avro one too: it is checked against its schema and encoded
            body = body.read()
        if topic.content_type is ContentType.JSON:
            if topic.json_validation_enabled:
                _check_json(topic, body, headers.get("content-type", ""))
            self._produce(topic, message_id, body, None, headers, answer)
            return
        body_as = body_format(headers.get("content-type", ""))
        if body_as is Format.OTHER:
            raise UnsupportedMediaType(
                f"Content-Type {headers.get('content-type')} is not accepted by Avro topic {topic.qualified_name}; "
                "publish application/json, avro/json or avro/binary"
            )
        # the schema may have to be read from the repository first
        task = asyncio.get_running_loop().create_task(
            self._publish_avro(topic, message_id, body, body_as, headers, answer)
        )
        self._avro_tasks.add(task)
        task.add_done_callback(self._avro_tasks.discard)

    async def _publish_avro(
        self, topic: Topic, message_id: str, body: bytes, body_as: Format, headers: Mapping[str, str], answer: Answer
    ) -> None:
        try:
            if self._schemas is None:
                raise ValidationError(f"topic {topic.qualified_name} takes Avro, and no schema is available")
            # As Hermes: Schema-Id before Schema-Version, else the latest. A schema's id is its version here.
            field, requested = SCHEMA_ID_HEADER, headers.get(_SCHEMA_ID)
            if requested is None:
                field, requested = SCHEMA_VERSION_HEADER, headers.get(_SCHEMA_VERSION)
            wanted = schema_version(requested, field) if requested is not None else None
            version, schema = await self._schemas.get(topic.name, wanted, field)
            value = _AVRO_ENCODERS[body_as](schema, body)
            if len(value) > kafka_body_limit(topic):  # offloaded as encoded, Avro binary like any Avro message
                self._offload_limit(topic, len(value))
                await self._offload(topic, message_id, value, version, headers, answer)
                return
        except Exception as exc:  # a task's error reaches nobody else: the request is answered with it (500 if a bug)
            answer(exc)
            return
        self._produce(topic, message_id, value, version, headers, answer)

    def _offload_limit(self, topic: Topic, size: int) -> None:
        """Raises 413 for a body too large for Kafka that cannot be offloaded either."""
        limit = 0 if self._offloader is None else self._offloader.limit_of(topic)
        if size > limit:
            beyond = f" and the offload limit {limit}" if self._offloader is not None else ""
            if size <= topic.max_message_size:  # within the topic's limit, beyond what goes to Kafka itself
                raise PayloadTooLarge(
                    f"Message size {size} exceeds {KAFKA_MAX_BODY}, the largest body sent to Kafka itself, and "
                    + (f"the offload limit {limit}" if self._offloader is not None else "offloading is off")
                )
            raise PayloadTooLarge(
                f"Message size {size} exceeds the topic's maxMessageSize {topic.max_message_size}{beyond}"
            )

    def _publish_large(
        self, topic: Topic, message_id: str, body: bytes | SpooledBody, headers: Mapping[str, str], answer: Answer
    ) -> None:
        """A JSON body too large for Kafka (over the topic's maxMessageSize or KAFKA_MAX_BODY) and within the offload
        limit: offloaded."""
        if topic.json_validation_enabled:  # validation needs the body whole: a spooled one is read once for it
            _check_json(topic, body.read() if isinstance(body, SpooledBody) else body, headers.get("content-type", ""))
        task = asyncio.get_running_loop().create_task(self._offload(topic, message_id, body, None, headers, answer))
        self._avro_tasks.add(task)
        task.add_done_callback(self._avro_tasks.discard)

    async def _offload(
        self,
        topic: Topic,
        message_id: str,
        body: bytes | SpooledBody,
        schema_version: int | None,
        headers: Mapping[str, str],
        answer: Answer,
    ) -> None:
        """Stores the message beside Kafka and produces its placeholder in its place."""
        assert self._offloader is not None
        try:
            placeholder = await self._offloader.store(
                topic.qualified_name,
                message_id,
                body,
                self._record_headers(message_id, schema_version, headers),
                _key(headers),
            )
        except HermesError as exc:
            answer(exc)
            return
        self._produce(topic, message_id, placeholder, schema_version, headers, answer, offloaded=True)

    def _record_headers(
        self, message_id: str, schema_version: int | None, headers: Mapping[str, str]
    ) -> list[tuple[str, bytes]]:
        propagated = None
        if self._propagated:
            propagated = {name: v for lower, name in self._propagated.items() if (v := headers.get(lower)) is not None}
        record = kafka_headers(message_id, int(time.time() * 1000), schema_version, propagated)
        # The publisher's W3C trace context goes with the message when it is valid (a tracestate with its
        # traceparent only), as the spec says: to every delivery attempt. With tracing on, the traceparent is the
        # publish span's, written by Tracing.publish: not validated again.
        traceparent = headers.get(TRACEPARENT)
        if traceparent is not None and (self._tracing is not None or valid_traceparent(traceparent)):
            record.append((_TRACEPARENT_RECORD, traceparent.encode()))
            tracestate = headers.get(TRACESTATE)
            if tracestate is not None and valid_tracestate(tracestate):
                record.append((_TRACESTATE_RECORD, tracestate.encode()))
        return record

    def _produce(
        self,
        topic: Topic,
        message_id: str,
        value: bytes,
        schema_version: int | None,
        headers: Mapping[str, str],
        answer: Answer,
        offloaded: bool = False,
        event: CloudEvent | None = None,
    ) -> None:
        record_headers = self._record_headers(message_id, schema_version, headers)
        if offloaded:
            record_headers.extend(placeholder_headers(message_id))
        key = _key(headers)
        if event is not None:
            record_headers.extend(event.kafka_headers())
            key = key or event.partition_key
        tracker = self._tracker if topic.tracking_enabled else None
        entry = JournalEntry(message_id, topic.qualified_name, value, key, tuple(record_headers), topic.ack)
        if tracker is not None:
            tracker.frontend(message_id, entry.topic, TraceStatus.INFLIGHT)
        acked = None if self._tracing is None else self._tracing.ack(entry.topic, headers)
        if topic.ack is Ack.NONE:  # no ack to wait for: answered unless the producer refused it at once
            inflight = _InFlight(self, entry, tracker, answer, 0.0, acked)
            self._producer.produce(entry.topic, value, inflight.settled, key=key, headers=record_headers, ack=Ack.NONE)
            if not inflight.answered:
                inflight.answered = True
                answer(PublishResult(message_id, True))
            return
        loop = asyncio.get_running_loop()
        timeouts = self._timeouts[topic.ack]
        inflight = _InFlight(self, entry, tracker, answer, loop.time() + timeouts.seconds, acked)
        timeouts.track(inflight, loop)
        self._producer.produce(entry.topic, value, inflight.settled, key=key, headers=record_headers, ack=topic.ack)

    def resend(self, entry: JournalEntry) -> None:
        """Produces a journaled message again (at start-up, or after the broker refused it)."""
        self._producer.produce(
            entry.topic,
            entry.value,
            lambda error: self.journaled_settled(entry, error),
            key=entry.key,
            headers=entry.headers,
            ack=Ack(entry.ack),
        )

    def journaled_settled(self, entry: JournalEntry, error: Exception | None) -> None:
        if error is None:
            assert self.journal is not None
            self.journal.acknowledge(entry.message_id)
        else:
            asyncio.get_running_loop().call_later(_RESEND_DELAY, self.resend, entry)


def _key(headers: Mapping[str, str]) -> bytes | None:
    partition_key = headers.get(_PARTITION_KEY)
    return partition_key.encode() if partition_key else None


def _check_json(topic: Topic, body: bytes, content_type: str) -> None:
    if body_format(content_type) is not Format.JSON:
        raise UnsupportedMediaType(
            f"Content-Type {content_type} is not accepted by topic {topic.qualified_name} (jsonValidationEnabled); "
            "publish JSON (application/json)"
        )
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ValidationError(f"the message is not valid JSON: {exc}") from None


class _InFlight:
    """One publish between produce and the broker's outcome. Answered by the outcome or the ack timeout, whichever
    comes first; a message answered 202 is journaled first, and its later outcome goes to the journal."""

    __slots__ = ("_acked", "_answer", "_entry", "_journaled", "_publisher", "_tracker", "answered", "deadline")

    def __init__(
        self,
        publisher: Publisher,
        entry: JournalEntry,
        tracker: Tracker | None,
        answer: Answer,
        deadline: float,
        acked: Callable[[Exception | None], None] | None = None,  # ends the ack's span
    ) -> None:
        self._acked = acked
        self._publisher = publisher
        self._entry = entry
        self._tracker = tracker
        self._answer = answer
        self._journaled = False
        self.answered = False
        self.deadline = deadline

    def settled(self, error: Exception | None) -> None:
        """The broker's outcome. It runs inside the producer's poll, so the trace event is produced a moment later."""
        entry = self._entry
        if error is not None:
            PRODUCER_ERRORS.labels(entry.topic).inc()
        if self._acked is not None:
            self._acked(error)
        if self._tracker is not None:
            reason = error.message if isinstance(error, HermesError) else None
            status = TraceStatus.FAILED if error else TraceStatus.SUCCESS
            asyncio.get_running_loop().call_soon(self._tracker.frontend, entry.message_id, entry.topic, status, reason)
        if not self.answered:
            self.answered = True
            self._answer(PublishResult(entry.message_id, True) if error is None else error)
        elif self._journaled:
            self._publisher.journaled_settled(entry, error)

    def expire(self) -> None:
        """The ack timeout came first: kept on disk before the 202 leaves, so a crash cannot lose it."""
        self.answered = True
        journal = self._publisher.journal
        if journal is not None:
            try:
                journal.put(self._entry)
            except HermesError as exc:
                self._answer(exc)
                return
            self._journaled = True
        self._answer(PublishResult(self._entry.message_id, False))

"""Topic preview: a topic's most recent messages, read from Kafka when asked.

Hermes' frontends keep a preview log (off by default); here the management API reads the messages at the end
of the topic's partitions instead, so the preview is always there and always current. As Hermes, a preview
is at most ``PREVIEW_SIZE`` messages, each cut to ``PREVIEW_MAX_BYTES`` with ``truncated`` set, and Avro
messages are shown as JSON.
"""

from __future__ import annotations

import time

import orjson

from hermes.broker.admin import BrokerAdmin
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.domain.avro import avro_to_record
from hermes.domain.message import Message
from hermes.domain.topic import ContentType, Topic
from hermes.errors import HermesError, ValidationError
from hermes.metadata.repository import MetadataRepository

PREVIEW_SIZE = 3
PREVIEW_MAX_BYTES = 10 * 1024  # Hermes' frontend.message.preview.maxSizeKb
_READ_TIMEOUT_S = 5.0


def _read(admin: BrokerAdmin, wanted: dict[int, tuple[int, int]], topic: str) -> list[Message]:
    """The messages of ``topic`` from each partition's start offset up to (not including) its end offset."""
    if not wanted:
        return []
    consumer = BrokerConsumer(admin.connection, "hermes-management-preview", fetch_wait_ms=100)
    try:
        consumer.assign({(topic, p): start for p, (start, _) in wanted.items()})
        found: list[Message] = []
        remaining = sum(end - start for start, end in wanted.values())
        deadline = time.monotonic() + _READ_TIMEOUT_S
        while remaining > 0 and time.monotonic() < deadline:
            for message in consumer.poll(max_messages=remaining, timeout=0.2):
                if message.offset < wanted[message.partition][1]:
                    found.append(message)
                    remaining -= 1
        return found
    finally:
        consumer.close()


def recent_messages(admin: BrokerAdmin, topic: Topic) -> list[Message]:
    """Up to ``PREVIEW_SIZE`` of the newest messages of the topic, oldest first."""
    name = topic.qualified_name
    begin, end = admin.beginning_offsets(name), admin.end_offsets(name)
    wanted = {p: (max(begin.get(p, 0), high - PREVIEW_SIZE), high) for p, high in end.items() if high > begin.get(p, 0)}
    messages = sorted(_read(admin, wanted, name), key=lambda m: (m.publish_timestamp, m.partition, m.offset))
    return messages[-PREVIEW_SIZE:]


def message_at(admin: BrokerAdmin, topic: Topic, partition: int, offset: int) -> Message | None:
    name = topic.qualified_name
    begin, end = admin.beginning_offsets(name), admin.end_offsets(name)
    if partition not in end:
        raise ValidationError(f"topic {name} has no partition {partition}", "partition")
    if not begin[partition] <= offset < end[partition]:
        return None
    found = _read(admin, {partition: (offset, offset + 1)}, name)
    return found[0] if found else None


def as_json(repository: MetadataRepository, topic: Topic, message: Message) -> bytes:
    """The message as Hermes' preview shows it: Avro as JSON, with the message's id and publish time in the
    schema's ``__metadata`` (the raw bytes if it does not decode, as Hermes)."""
    if topic.content_type is not ContentType.AVRO:
        return message.body
    try:
        _, schema = repository.get_schema(topic.name, message.schema_version)
        record = avro_to_record(schema, message.body)
    except (HermesError, ValueError, TypeError, EOFError, IndexError, KeyError):
        return message.body  # a preview shows what it can: a message that does not decode is shown raw
    if isinstance(record, dict) and "__metadata" in record and record["__metadata"] is None:
        # Hermes' frontend writes the message's id and publish time into a schema's __metadata map
        record["__metadata"] = {"messageId": message.message_id, "timestamp": str(message.publish_timestamp)}
    return orjson.dumps(record, default=str)


def preview(content: bytes) -> dict[str, object]:
    """Hermes' ``MessageTextPreview``: the content as text, cut to ``PREVIEW_MAX_BYTES``."""
    truncated = len(content) > PREVIEW_MAX_BYTES
    text = content[:PREVIEW_MAX_BYTES].decode("utf-8", "replace")
    return {"content": text, "truncated": truncated}

"""Messages as they travel through Kafka, and the header names Hermes speaks."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

# HTTP headers (publisher-facing and subscriber-facing), as in Hermes.
MESSAGE_ID_HEADER = "Hermes-Message-Id"
RETRY_COUNT_HEADER = "Hermes-Retry-Count"
TOPIC_NAME_HEADER = "Hermes-Topic-Name"
SUBSCRIPTION_NAME_HEADER = "Hermes-Subscription-Name"
BATCH_ID_HEADER = "Hermes-Batch-Id"
SCHEMA_VERSION_HEADER = "Schema-Version"
SCHEMA_ID_HEADER = "Schema-Id"
PARTITION_KEY_HEADER = "Partition-Key"
IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"  # our extension (frontend/idempotency.py)

# Kafka record headers of a Hermes message (written by kafka_headers, read by parse_kafka_headers).
KAFKA_MESSAGE_ID = "hermes-message-id"
KAFKA_PUBLISH_TIMESTAMP = "hermes-publish-ts"
KAFKA_SCHEMA_VERSION = "hermes-schema-version"
# The header of an offloaded large message's placeholder (the large-message protocol's, docs/large-messages.md)
PLACEHOLDER_FORMAT = ("_format", b"external")
# Publisher headers on the propagation allow-list travel with this prefix.
KAFKA_PROPAGATED_PREFIX = "h-"
# A CloudEvent's attributes, as the CloudEvents Kafka binding writes them (hermes.domain.cloudevents)
KAFKA_CLOUD_EVENT_PREFIX = "ce_"
KAFKA_CONTENT_TYPE = "content-type"


class _MessageIds:
    """Random (version 4) UUIDs as strings, cut from a pool of random hex digits refilled with one system call
    per 256 ids (``str(uuid.uuid4())`` costs a system call and a UUID object per id: 4 times as much). For
    one thread: the event loop that publishes."""

    _IDS_PER_REFILL = 256

    def __init__(self) -> None:
        self._hex = ""
        self._at = 0
        self._variant = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}  # RFC 4122's
        os.register_at_fork(after_in_child=self.reset)  # a forked child must not repeat the parent's ids

    def reset(self) -> None:
        self._hex, self._at = "", 0

    def new(self) -> str:
        at = self._at
        if at >= len(self._hex):
            self._hex, at = os.urandom(16 * self._IDS_PER_REFILL).hex(), 0
        self._at = at + 32
        h = self._hex
        # 8-4-4-4-12 hex digits; the third group starts with the version (4), the fourth with the variant
        return (
            f"{h[at : at + 8]}-{h[at + 8 : at + 12]}-4{h[at + 13 : at + 16]}-"
            f"{self._variant[h[at + 16]]}{h[at + 17 : at + 20]}-{h[at + 20 : at + 32]}"
        )


new_message_id = _MessageIds().new


class StoredBody(Protocol):
    """An offloaded message's body once fetched: kept in a file (``hermes.http.streamed.FileRegion``)."""

    size: int

    def read(self) -> bytes: ...

    def close(self) -> None: ...


# Not frozen: a frozen dataclass is built with one object.__setattr__ per field, which doubled the cost of the
# one built for every message read (treat it as immutable all the same: dataclasses.replace makes a changed copy).
@dataclass(slots=True)
class Message:
    """A message read from Kafka, ready for delivery."""

    topic: str
    partition: int
    offset: int
    message_id: str
    body: bytes
    publish_timestamp: int  # epoch millis
    key: bytes | None = None
    schema_version: int | None = None
    propagated_headers: dict[str, str] = field(default_factory=dict)
    # A placeholder of an offloaded large message (header ``_format: external``): where its body is
    external_url: str | None = None
    # ...and once its body is fetched: streamed to subscribers from there, ``body`` staying the placeholder
    stored: StoredBody | None = None
    # A CloudEvent's attributes (``datacontenttype`` among them when given); its data is ``body``
    cloud_event: dict[str, str] | None = None

    @property
    def size(self) -> int:
        return len(self.body)

    def whole_body(self) -> bytes:
        """The body as subscribers get it, in memory: a stored one is read whole (for a filter or a conversion)."""
        return self.body if self.stored is None else self.stored.read()


KafkaHeader = tuple[str, bytes]


def kafka_headers(
    message_id: str, published: int, schema_version: int | None = None, propagated: Mapping[str, str] | None = None
) -> list[KafkaHeader]:
    """The Kafka headers of a message: what the frontend writes, and what an offline retransmission writes
    again with the archived values. ``propagated``: the publisher's headers on the allow-list, by name."""
    headers = [(KAFKA_MESSAGE_ID, message_id.encode()), (KAFKA_PUBLISH_TIMESTAMP, str(published).encode())]
    if schema_version is not None:
        headers.append((KAFKA_SCHEMA_VERSION, str(schema_version).encode()))
    if propagated:
        headers.extend((KAFKA_PROPAGATED_PREFIX + name, value.encode()) for name, value in propagated.items())
    return headers


# What ``parse_kafka_headers`` read: the message id, the publish timestamp, the schema version (None where a header
# is missing or unreadable), the propagated headers and a CloudEvent's attributes (None: not a CloudEvent). A plain
# tuple: a NamedTuple's construction, a Python call, cost a third of the parsing, which runs for every message read.
KafkaHeaders = tuple[str | None, int | None, int | None, dict[str, str], dict[str, str] | None]


_PREFIX_LENGTH = len(KAFKA_PROPAGATED_PREFIX)
_CLOUD_EVENT_PREFIX_LENGTH = len(KAFKA_CLOUD_EVENT_PREFIX)


def parse_kafka_headers(headers: Iterable[tuple[str, bytes | None]]) -> KafkaHeaders:
    """Reads the headers ``kafka_headers`` writes. Headers written by other producers are never trusted: one
    this cannot read counts as missing. Of a header given twice, the last counts."""
    message_id: str | None = None
    published: int | None = None
    schema_version: int | None = None
    propagated: dict[str, str] = {}
    cloud_event: dict[str, str] | None = None
    content_type: str | None = None
    for name, value in headers:  # one pass: this runs for every message read
        if value is None:
            continue
        if name == KAFKA_MESSAGE_ID:
            message_id = _id_header(value)
        elif name == KAFKA_PUBLISH_TIMESTAMP:
            published = _int_header(value)
        elif name == KAFKA_SCHEMA_VERSION:
            schema_version = _int_header(value)
        elif name.startswith(KAFKA_PROPAGATED_PREFIX):
            propagated[name[_PREFIX_LENGTH:]] = value.decode("utf-8", "replace")
        elif name.startswith(KAFKA_CLOUD_EVENT_PREFIX):
            if cloud_event is None:
                cloud_event = {}
            cloud_event[name[_CLOUD_EVENT_PREFIX_LENGTH:]] = value.decode("utf-8", "replace")
        elif name == KAFKA_CONTENT_TYPE:
            content_type = value.decode("utf-8", "replace")
    if cloud_event is not None and content_type is not None:
        cloud_event["datacontenttype"] = content_type
    return message_id, published, schema_version, propagated, cloud_event


def _int_header(value: bytes | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _id_header(value: bytes | None) -> str | None:
    """Ids travel on as HTTP header values: printable ASCII only."""
    try:
        text = value.decode("ascii") if value else None
    except UnicodeDecodeError:
        return None
    return text if text and text.isprintable() else None

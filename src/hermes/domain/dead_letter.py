"""Dead letters (our extension): a subscription with the dead-letter policy on keeps every message it discards in a
Kafka topic of its own, with why and how it was given up, so that it can be looked at and redriven.

A dead letter is one Kafka record: the message's original key, body (an offloaded message's placeholder, never its
bytes) and Kafka headers, plus ``hermes-dl-*`` headers with the reason, the last status, the attempts, the time of
the discard and where the message was read. Its id is its offset in the dead-letter topic, which has one
partition: ids, and the order of dead letters, are the order of the discards.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from hermes.domain.message import (
    KAFKA_CLOUD_EVENT_PREFIX,
    KAFKA_CONTENT_TYPE,
    KAFKA_PROPAGATED_PREFIX,
    PLACEHOLDER_FORMAT,
    KafkaHeader,
    Message,
    kafka_headers,
    parse_kafka_headers,
)
from hermes.domain.names import SubscriptionName

# Every Hermes topic's Kafka name holds a dot (group.topic) and these hold none, so no user topic takes one.
DEAD_LETTER_TOPIC_PREFIX = "hermes-dead-letters_"
_KAFKA_NAME_LIMIT = 249
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True)
class DeadLetterPolicy:
    """``deadLetters`` of a subscription: off by default (Hermes drops what it discards)."""

    enabled: bool = False


def dead_letter_topic(subscription: SubscriptionName) -> str:
    """The Kafka topic of the subscription's dead letters: readable, without a dot, and made unique by a hash of
    the subscription's name (the readable part is cut to fit Kafka's 249 characters)."""
    qualified = subscription.qualified
    digest = hashlib.sha256(qualified.encode()).hexdigest()[:16]
    readable = _UNSAFE.sub("_", qualified.replace(".", "_").replace("$", "__"))
    room = _KAFKA_NAME_LIMIT - len(DEAD_LETTER_TOPIC_PREFIX) - len(digest) - 1
    return f"{DEAD_LETTER_TOPIC_PREFIX}{readable[:room]}_{digest}"


def is_dead_letter_topic(name: str) -> bool:
    return name.startswith(DEAD_LETTER_TOPIC_PREFIX) and "." not in name


def original_headers(message: Message) -> list[KafkaHeader]:
    """The message's Kafka headers as the frontend wrote them, from what was read of them."""
    headers = kafka_headers(message.message_id, message.publish_timestamp, message.schema_version)
    headers += [(KAFKA_PROPAGATED_PREFIX + k, v.encode()) for k, v in message.propagated_headers.items()]
    for name, value in (message.cloud_event or {}).items():
        key = KAFKA_CONTENT_TYPE if name == "datacontenttype" else KAFKA_CLOUD_EVENT_PREFIX + name
        headers.append((key, value.encode()))
    if message.external_url is not None or message.stored is not None:  # offloaded (stored: its body fetched)
        headers.append(PLACEHOLDER_FORMAT)
    return headers


# The dead-letter record's own headers, beside the message's original ones
DL_REASON = "hermes-dl-reason"
DL_LAST_STATUS = "hermes-dl-last-status"
DL_ATTEMPTS = "hermes-dl-attempts"
DL_TIME = "hermes-dl-time"
DL_TOPIC = "hermes-dl-topic"
DL_PARTITION = "hermes-dl-partition"
DL_OFFSET = "hermes-dl-offset"
DL_MESSAGE_ID = "hermes-dl-message-id"
_OWN = frozenset({DL_REASON, DL_LAST_STATUS, DL_ATTEMPTS, DL_TIME, DL_TOPIC, DL_PARTITION, DL_OFFSET, DL_MESSAGE_ID})


def _encoded(data: bytes) -> tuple[str, str]:
    """Bytes as JSON text: as they are when UTF-8, else base64; with the encoding's name."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), "base64"


@dataclass(frozen=True)
class DeadLetter:
    """A discarded message and why. ``id`` is its offset in the dead-letter topic (-1 before it is written).

    Its record is the message's own (key, body, original headers: no larger than the message's record, so
    whatever its topic took, the dead-letter topic takes) with the ``hermes-dl-*`` headers added."""

    reason: str
    last_status: int | None
    attempts: int
    time: int  # epoch millis of the discard
    topic: str
    partition: int
    offset: int
    message_id: str
    headers: tuple[KafkaHeader, ...]  # the message's original ones
    key: bytes | None
    body: bytes
    id: int = -1

    @classmethod
    def of(cls, message: Message, reason: str, last_status: int | None, attempts: int, at: int) -> DeadLetter:
        return cls(
            reason,
            last_status,
            attempts,
            at,
            message.topic,
            message.partition,
            message.offset,
            message.message_id,
            tuple(original_headers(message)),
            message.key,
            message.body,  # an offloaded message's placeholder: its body stays where it was offloaded
        )

    def record_headers(self) -> list[KafkaHeader]:
        own = [
            (DL_REASON, self.reason.encode()),
            (DL_ATTEMPTS, str(self.attempts).encode()),
            (DL_TIME, str(self.time).encode()),
            (DL_TOPIC, self.topic.encode()),
            (DL_PARTITION, str(self.partition).encode()),
            (DL_OFFSET, str(self.offset).encode()),
            (DL_MESSAGE_ID, self.message_id.encode()),
        ]
        if self.last_status is not None:
            own.append((DL_LAST_STATUS, str(self.last_status).encode()))
        return [*self.headers, *own]

    @classmethod
    def from_record(
        cls, offset: int, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes | None]]
    ) -> DeadLetter | None:
        """The dead letter a record of the dead-letter topic holds; None for a record that is none."""
        own = {name: (value_ or b"").decode("utf-8", "replace") for name, value_ in headers if name in _OWN}
        try:
            status = own.get(DL_LAST_STATUS)
            return cls(
                own[DL_REASON],
                None if status is None else int(status),
                int(own[DL_ATTEMPTS]),
                int(own[DL_TIME]),
                own[DL_TOPIC],
                int(own[DL_PARTITION]),
                int(own[DL_OFFSET]),
                own[DL_MESSAGE_ID],
                tuple((name, v) for name, v in headers if name not in _OWN and v is not None),
                key,
                value,
                offset,
            )
        except (KeyError, ValueError):
            return None

    def to_json(self) -> dict[str, Any]:
        """The API's shape: the body as text when it is UTF-8 (else base64, with ``bodyEncoding``)."""
        body, body_encoding = _encoded(self.body)
        out: dict[str, Any] = {
            "id": str(self.id),
            "messageId": self.message_id,
            "reason": self.reason,
            "lastStatus": self.last_status,
            "attempts": self.attempts,
            "timestamp": self.time,
            "topicName": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "headers": {name: value.decode("utf-8", "replace") for name, value in self.headers},
            "body": body,
            "bodyEncoding": body_encoding,
            "offloaded": PLACEHOLDER_FORMAT in self.headers,
        }
        if self.key is not None:
            out["key"], out["keyEncoding"] = _encoded(self.key)
        return out

    def message(self) -> Message:
        """The message again, as read from its topic (for a redrive)."""
        message_id, published, schema_version, propagated, cloud_event = parse_kafka_headers(self.headers)
        external_url = None
        if PLACEHOLDER_FORMAT in self.headers:
            try:
                url = orjson.loads(self.body).get("url")
            except (orjson.JSONDecodeError, AttributeError):
                url = None
            external_url = url if isinstance(url, str) else ""
        return Message(
            self.topic,
            self.partition,
            self.offset,
            message_id or self.message_id,
            self.body,
            published if published is not None else self.time,
            self.key,
            schema_version,
            propagated,
            external_url,
            None,
            cloud_event,
        )

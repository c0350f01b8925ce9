"""Messages as they travel through Kafka, and the header names Hermes speaks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# HTTP headers (publisher-facing and subscriber-facing), as in Hermes.
MESSAGE_ID_HEADER = "Hermes-Message-Id"
RETRY_COUNT_HEADER = "Hermes-Retry-Count"
TOPIC_NAME_HEADER = "Hermes-Topic-Name"
SUBSCRIPTION_NAME_HEADER = "Hermes-Subscription-Name"
BATCH_ID_HEADER = "Hermes-Batch-Id"
SCHEMA_VERSION_HEADER = "Schema-Version"
PARTITION_KEY_HEADER = "Partition-Key"

# Kafka record headers written by the frontend.
KAFKA_MESSAGE_ID = "hermes-message-id"
KAFKA_PUBLISH_TIMESTAMP = "hermes-publish-ts"
KAFKA_SCHEMA_VERSION = "hermes-schema-version"
KAFKA_CONTENT_TYPE = "hermes-content-type"
# Publisher headers on the propagation allow-list travel with this prefix.
KAFKA_PROPAGATED_PREFIX = "h-"


class _MessageIds:
    """Random (version 4) UUIDs as strings, from a pool of random bytes refilled with one system call per
    256 ids (``str(uuid.uuid4())`` costs a system call and a UUID object per id: 4 times as much). For one
    thread: the event loop that publishes."""

    _POOL = 4096

    def __init__(self) -> None:
        self._random = b""
        self._at = 0
        os.register_at_fork(after_in_child=self.reset)  # a forked child must not repeat the parent's ids

    def reset(self) -> None:
        self._random, self._at = b"", 0

    def new(self) -> str:
        at = self._at
        if at >= len(self._random):
            self._random, at = os.urandom(self._POOL), 0
        self._at = at + 16
        raw = bytearray(self._random[at : at + 16])
        raw[6] = raw[6] & 0x0F | 0x40  # version 4
        raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
        h = raw.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


new_message_id = _MessageIds().new


@dataclass(frozen=True)
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

    @property
    def size(self) -> int:
        return len(self.body)

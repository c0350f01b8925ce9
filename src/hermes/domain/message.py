"""Messages as they travel through Kafka, and the header names Hermes speaks."""

from __future__ import annotations

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

"""Message tracking's trace events: written by frontends and consumers to the Kafka tracking topic, materialized
into trace tables by the pipeline, served by management as Hermes' ``.../trace`` and ``.../undelivered``
resources. Events are JSON with Hermes' trace field names."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

import orjson

TRACKING_TOPIC = "hermes.tracking"


class TraceStatus(StrEnum):
    INFLIGHT = "INFLIGHT"
    SUCCESS = "SUCCESS"
    FAILED = "FAILED"
    DISCARDED = "DISCARDED"


@dataclass(frozen=True)
class TraceEvent:
    messageId: str  # Hermes trace field names, camelCase on the wire
    timestamp: int
    topicName: str
    status: str
    cluster: str
    subscription: str | None = None  # None for frontend events
    partition: int | None = None
    offset: int | None = None
    reason: str | None = None
    # An addition to Hermes' fields: when the frontend accepted the message, so the pipeline can measure
    # delivery latency (publish to successful delivery) from consumer events alone.
    publishTimestamp: int | None = None

    def to_json(self) -> bytes:
        return orjson.dumps({k: v for k, v in asdict(self).items() if v is not None})

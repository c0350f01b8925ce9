"""Message tracking: trace events written by frontends and consumers to the Kafka tracking topic.

The pipeline materializes them into trace tables; management serves them as Hermes' ``.../trace`` and
``.../undelivered`` resources. Events are JSON with Hermes' trace field names.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from enum import StrEnum

import orjson

from hermes.broker.producer import BrokerProducer
from hermes.domain.topic import Ack

log = logging.getLogger(__name__)

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


def now_ms() -> int:
    return int(time.time() * 1000)


class Tracker:
    """Writes trace events without ever slowing down or failing the path that reports them."""

    def __init__(self, producer: BrokerProducer, cluster: str, topic: str = TRACKING_TOPIC) -> None:
        self._producer = producer
        self._cluster = cluster
        self._topic = topic

    def frontend(self, message_id: str, topic: str, status: TraceStatus, reason: str | None = None) -> None:
        self._emit(TraceEvent(message_id, now_ms(), topic, status.value, self._cluster, reason=reason))

    def consumer(
        self,
        message_id: str,
        topic: str,
        subscription: str,
        status: TraceStatus,
        partition: int,
        offset: int,
        reason: str | None = None,
        publish_timestamp: int | None = None,
    ) -> None:
        self._emit(
            TraceEvent(
                message_id,
                now_ms(),
                topic,
                status.value,
                self._cluster,
                subscription,
                partition,
                offset,
                reason,
                publish_timestamp,
            )
        )

    def _emit(self, event: TraceEvent) -> None:
        try:
            future = self._producer.send(self._topic, event.to_json(), key=event.messageId.encode(), ack=Ack.LEADER)
        except Exception:
            log.warning("dropping trace event of %s", event.messageId, exc_info=True)
            return
        future.add_done_callback(_ignore_outcome)


def _ignore_outcome(future: object) -> None:
    exception = getattr(future, "exception", None)
    if callable(exception) and not getattr(future, "cancelled", lambda: False)():
        exception()  # retrieved: a lost trace event is not worth a warning per message

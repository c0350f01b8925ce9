"""The tracker: frontends and consumers write trace events (:mod:`hermes.domain.trace`) to the tracking topic
through it."""

from __future__ import annotations

import logging
import time

from hermes.broker.producer import BrokerProducer
from hermes.domain.topic import Ack
from hermes.domain.trace import TRACKING_TOPIC, TraceEvent, TraceStatus

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Tracker:
    """Writes trace events without ever slowing down or failing the path that reports them."""

    def __init__(self, producer: BrokerProducer, cluster: str, topic: str = TRACKING_TOPIC) -> None:
        self._producer = producer
        self._cluster = cluster
        self._topic = topic

    def frontend(self, message_id: str, topic: str, status: TraceStatus, reason: str | None = None) -> None:
        self._emit(TraceEvent(message_id, _now_ms(), topic, status.value, self._cluster, reason=reason))

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
                _now_ms(),
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

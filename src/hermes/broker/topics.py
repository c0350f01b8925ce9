"""The Kafka topic behind each Hermes topic: created, altered and, when the broker lost it, created again with the
topic's settings. Kafka's automatic topic creation is off on the embedded broker and never relied on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from hermes.broker.admin import BrokerAdmin
from hermes.domain.topic import MAX_IDEMPOTENCY_WINDOW, Topic
from hermes.domain.trace import TRACKING_TOPIC
from hermes.errors import HermesError
from hermes.tasks import cancel

log = logging.getLogger(__name__)

# The largest body that goes to Kafka as a record: a larger one, even within its topic's maxMessageSize, is offloaded
# beside Kafka. Records far larger strain the broker (its socket.request.max.bytes is 100 MiB by default) and every
# fetch; the producer's message.max.bytes and each topic's max.message.bytes are set to match it.
KAFKA_MAX_BODY = 8 * 1024 * 1024
# Kafka's max.message.bytes counts a whole record batch: Hermes' headers (message id, timestamp, propagated
# headers) and the batch's framing come on top of the body, which the frontend checks itself.
RECORD_HEADROOM = 64 * 1024
PRODUCER_MAX_BYTES = KAFKA_MAX_BODY + RECORD_HEADROOM


@dataclass(frozen=True)
class InternalTopic:
    """A Kafka topic Hermes itself owns: never a Hermes topic, never listed as an inconsistency, never deleted
    through the API, and created again by the reconciliation when a Kafka admin deletes it."""

    name: str
    partitions: int | None = None  # None: --topic-partitions
    retention_ms: int | None = None  # None: the broker's default; -1: forever


TRACKING = InternalTopic(TRACKING_TOPIC)
# the large-message discovery topic: its latest record names the offload service (offload/discovery.py)
OFFLOAD_DISCOVERY = InternalTopic("sys.metadata", partitions=1, retention_ms=-1)
# the idempotency keys of publishes (frontend/idempotency.py): records older than the longest window are useless
IDEMPOTENCY = InternalTopic("hermes.idempotency", retention_ms=MAX_IDEMPOTENCY_WINDOW * 1000)
INTERNAL_TOPICS = {topic.name: topic for topic in (TRACKING, OFFLOAD_DISCOVERY, IDEMPOTENCY)}


def kafka_body_limit(topic: Topic) -> int:
    """The largest body of ``topic`` produced to Kafka itself; larger ones are offloaded."""
    return min(topic.max_message_size, KAFKA_MAX_BODY)


def max_message_bytes(topic: Topic) -> int:
    return kafka_body_limit(topic) + RECORD_HEADROOM


class KafkaTopics:
    def __init__(self, admin: BrokerAdmin, partitions: int) -> None:
        self._admin = admin
        self._partitions = partitions

    def create(self, topic: Topic) -> None:
        self._admin.create_topic(
            topic.qualified_name,
            self._partitions,
            retention_ms=topic.retention_time.seconds * 1000,
            max_message_bytes=max_message_bytes(topic),
        )

    def create_internal(self, topic: InternalTopic) -> None:
        self._admin.create_topic(topic.name, topic.partitions or self._partitions, retention_ms=topic.retention_ms)

    def update(self, topic: Topic) -> None:
        """Applies the topic's retention and size limit, and grows its partitions to --topic-partitions when that
        was raised since (Kafka never shrinks a topic's partitions)."""
        name = topic.qualified_name
        self._admin.alter_topic(
            name, retention_ms=topic.retention_time.seconds * 1000, max_message_bytes=max_message_bytes(topic)
        )
        current = len(self._admin.partitions(name))
        if 0 < current < self._partitions:
            self._admin.add_partitions(name, self._partitions)
            log.info("Kafka topic %s grown from %d to %d partitions", name, current, self._partitions)

    def reconcile(self, topics: Iterable[Topic], internal: Iterable[InternalTopic] = ()) -> list[str]:
        """Creates the Kafka topics that the metadata store has, or Hermes' ``internal`` ones, and the broker lacks;
        returns their names (also those another process created first, after this one found them missing)."""
        present = self._admin.topic_names()
        created = []
        for own in internal:
            if own.name not in present:
                self.create_internal(own)
                created.append(own.name)
                log.info("created Hermes' own Kafka topic %s, missing in the broker", own.name)
        for topic in topics:
            if topic.qualified_name not in present:
                self.create(topic)
                created.append(topic.qualified_name)
                log.warning(
                    "Kafka topic %s was missing in the broker (a new or wiped cluster?): created it with %d "
                    "partitions, retention %d s, max.message.bytes %d",
                    topic.qualified_name,
                    self._partitions,
                    topic.retention_time.seconds,
                    max_message_bytes(topic),
                )
        return created


class TopicReconciler:
    """Reconciles at start and then every ``interval`` seconds, so that a topic the broker lost comes back within
    seconds and its publishers (whose messages wait in the journal) and consumers carry on."""

    def __init__(
        self,
        topics: KafkaTopics,
        source: Callable[[], list[Topic]],
        interval: float,
        internal: Iterable[InternalTopic] = (),
    ) -> None:
        self._topics = topics
        self._source = source
        self._interval = interval
        self._internal = tuple(internal)  # those this process's roles need
        self._task: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[str], Awaitable[None]]] = []

    def on_recreated(self, listener: Callable[[str], Awaitable[None]]) -> None:
        """``listener(topic)`` runs after a topic was found missing in the broker and created again."""
        self._listeners.append(listener)

    async def start(self) -> None:
        # Hermes' own topics are missing at the first start of every new cluster: no warning for them
        created = [name for name in await asyncio.to_thread(self._reconcile) if name not in INTERNAL_TOPICS]
        if created:
            log.warning("re-created %d Kafka topics missing in the broker: %s", len(created), ", ".join(created))
        self._task = asyncio.create_task(self._loop(), name="topic-reconciler")

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None

    def _reconcile(self) -> list[str]:
        return self._topics.reconcile(self._source(), self._internal)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                created = await asyncio.to_thread(self._reconcile)
            except HermesError as exc:
                log.warning("reconciling Kafka topics failed: %s", exc.message)
                continue
            for topic in created:
                if topic in INTERNAL_TOPICS:
                    log.warning("Hermes' own Kafka topic %s was deleted in the broker: created it again", topic)
                for listener in self._listeners:
                    await listener(topic)

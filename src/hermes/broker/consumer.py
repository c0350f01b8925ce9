"""Reading a topic in a consumer group, with explicit offset commits (never auto-commit)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from hermes.broker.connection import KafkaConnection
from hermes.domain.message import (
    KAFKA_MESSAGE_ID,
    KAFKA_PROPAGATED_PREFIX,
    KAFKA_PUBLISH_TIMESTAMP,
    KAFKA_SCHEMA_VERSION,
    Message,
)
from hermes.errors import BrokerUnavailable

log = logging.getLogger(__name__)

PartitionOffsets = Mapping[tuple[str, int], int]
AssignmentListener = Callable[[list[tuple[str, int]]], None]


def to_message(record: Any) -> Message:
    """Translates a Kafka record into a ``Message``; records without Hermes headers get derived ids."""
    headers: dict[str, bytes] = {k: v for k, v in (record.headers() or []) if v is not None}
    propagated = {
        k[len(KAFKA_PROPAGATED_PREFIX) :]: v.decode("utf-8", "replace")
        for k, v in headers.items()
        if k.startswith(KAFKA_PROPAGATED_PREFIX)
    }
    message_id = headers.get(KAFKA_MESSAGE_ID)
    published = headers.get(KAFKA_PUBLISH_TIMESTAMP)
    schema_version = headers.get(KAFKA_SCHEMA_VERSION)
    return Message(
        topic=record.topic(),
        partition=record.partition(),
        offset=record.offset(),
        message_id=message_id.decode() if message_id else f"{record.topic()}-{record.partition()}-{record.offset()}",
        body=record.value() or b"",
        publish_timestamp=int(published) if published else record.timestamp()[1],
        key=record.key(),
        schema_version=int(schema_version) if schema_version else None,
        propagated_headers=propagated,
    )


class BrokerConsumer:
    """A thin, synchronous wrapper; call it from one thread at a time."""

    def __init__(
        self,
        connection: KafkaConnection,
        group_id: str,
        *,
        session_timeout_ms: int = 6000,
        fetch_wait_max_ms: int = 10,
        auto_offset_reset: str = "latest",
        on_assign: AssignmentListener | None = None,
        on_revoke: AssignmentListener | None = None,
        **overrides: Any,
    ) -> None:
        self.group_id = group_id
        self._consumer = Consumer(
            connection.config(
                **{
                    "group.id": group_id,
                    "enable.auto.commit": False,
                    "auto.offset.reset": auto_offset_reset,
                    "session.timeout.ms": session_timeout_ms,
                    "heartbeat.interval.ms": max(500, session_timeout_ms // 5),
                    "enable.partition.eof": False,
                    "fetch.wait.max.ms": fetch_wait_max_ms,  # the delivery latency floor on Tansu (see config)
                    "queued.max.messages.kbytes": 8192,  # the prefetch bound per consumer (librdkafka: 64 MiB)
                    **overrides,
                }
            )
        )
        self._on_assign = on_assign
        self._on_revoke = on_revoke

    def subscribe(self, topics: Iterable[str]) -> None:
        def assigned(_: Any, partitions: list[TopicPartition]) -> None:
            if self._on_assign:
                self._on_assign([(p.topic, p.partition) for p in partitions])

        def revoked(_: Any, partitions: list[TopicPartition]) -> None:
            if self._on_revoke:
                self._on_revoke([(p.topic, p.partition) for p in partitions])

        self._consumer.subscribe(list(topics), on_assign=assigned, on_revoke=revoked)

    def assign(self, offsets: PartitionOffsets) -> None:
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])

    def poll(self, max_messages: int = 500, timeout: float = 0.1) -> list[Message]:
        """Up to ``max_messages`` as soon as one is there (or none after ``timeout`` seconds). ``consume``
        alone would wait for all ``max_messages`` or the whole timeout: 60-90 ms of delivery latency at
        moderate rates; so wait for the first, then take what is already fetched without waiting."""
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        records = (
            [first, *self._consumer.consume(num_messages=max_messages - 1, timeout=0)] if max_messages > 1 else [first]
        )
        out = []
        for record in records:
            err = record.error()
            if err is None:
                out.append(to_message(record))
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer %s: %s", self.group_id, err.str())
        return out

    def commit(self, offsets: PartitionOffsets) -> None:
        """Commits ``offsets`` (the *next* offset to read, per partition) synchronously."""
        if not offsets:
            return
        try:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False
            )
        except KafkaException as exc:
            raise BrokerUnavailable(f"committing offsets of {self.group_id} failed: {exc}") from exc

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._consumer.seek(TopicPartition(topic, partition, offset))

    def pause(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._consumer.pause([TopicPartition(t, p) for t, p in partitions])

    def resume(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._consumer.resume([TopicPartition(t, p) for t, p in partitions])

    def assignment(self) -> list[tuple[str, int]]:
        return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    def close(self) -> None:
        self._consumer.close()

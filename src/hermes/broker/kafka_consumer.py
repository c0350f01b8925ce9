"""Reading a topic in a consumer group, with explicit offset commits (never auto-commit)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from hermes.broker.connection import KafkaConnection
from hermes.domain.message import PLACEHOLDER_FORMAT, Message, parse_kafka_headers
from hermes.errors import BrokerUnavailable

log = logging.getLogger(__name__)

PartitionOffsets = Mapping[tuple[str, int], int]
# Called, during a poll, with the partitions about to go to another member (or lost), while offsets of theirs may
# still be committed.
RevocationListener = Callable[[list[tuple[str, int]]], None]
# Called, during a poll, with the partitions assigned to this member and the metadata of their committed offsets;
# returns the offsets to read some of them from instead of their committed ones.
AssignmentListener = Callable[[dict[tuple[str, int], str]], Mapping[tuple[str, int], int]]


def to_message(record: Any) -> Message:
    """Translates a Kafka record into a ``Message``; records without Hermes headers get derived ids. A header
    this cannot read is ignored (raising here would stop the subscription's consumer at that record at every
    restart)."""
    headers = record.headers() or ()
    message_id, published, schema_version, propagated, cloud_event = parse_kafka_headers(headers)
    topic, partition, offset = record.topic(), record.partition(), record.offset()
    value = record.value() or b""
    # positional: keywords cost twice as much, and this runs for every message read
    return Message(
        topic,
        partition,
        offset,
        message_id or f"{topic}-{partition}-{offset}",
        value,
        published if published is not None else record.timestamp()[1],
        record.key(),
        schema_version,
        propagated,
        _external_url(value) if PLACEHOLDER_FORMAT in headers else None,
        None,
        cloud_event,
    )


def _external_url(value: bytes) -> str:
    """The URL of an offloaded message's placeholder; an unreadable one is an empty URL, which cannot be fetched
    (the message is then undelivered, with that reason)."""
    try:
        url = orjson.loads(value or b"{}").get("url")
    except (orjson.JSONDecodeError, AttributeError):
        return ""
    return url if isinstance(url, str) else ""


class BrokerConsumer:
    """A thin, synchronous wrapper; call it from one thread at a time."""

    def __init__(
        self,
        connection: KafkaConnection,
        group_id: str,
        *,
        session_timeout_ms: int = 6000,
        fetch_wait_ms: int = 500,
        auto_offset_reset: str = "earliest",  # no committed offset (a new partition, a wiped cluster): from the start
        on_revoke: RevocationListener | None = None,
        on_assign: AssignmentListener | None = None,
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
                    # a member joining or leaving moves only the partitions that change hands; the others are
                    # read on without a pause and without going back to their last commit
                    "partition.assignment.strategy": "cooperative-sticky",
                    "fetch.wait.max.ms": fetch_wait_ms,
                    "queued.max.messages.kbytes": 8192,  # the prefetch bound per consumer (librdkafka: 64 MiB)
                    # once that bound is reached, fetching resumes this soon after the queue drains (librdkafka's
                    # 1000 ms stalled a consumer reading a backlog for most of each second)
                    "fetch.queue.backoff.ms": 20,
                    # a topic created again after the broker lost it is seen within seconds, not librdkafka's 5 min
                    "topic.metadata.refresh.interval.ms": 5000,
                    **overrides,
                }
            )
        )
        self._on_revoke = on_revoke
        self._on_assign = on_assign

    def subscribe(self, topics: Iterable[str]) -> None:
        def revoked(_: Any, partitions: list[TopicPartition]) -> None:
            if self._on_revoke:
                self._on_revoke([(p.topic, p.partition) for p in partitions])

        def assigned(_: Any, partitions: list[TopicPartition]) -> None:  # librdkafka assigns them after this
            if self._on_assign and partitions:
                try:
                    committed = self._consumer.committed(partitions, timeout=5)
                except KafkaException as exc:  # the partitions are read all the same
                    log.warning("consumer %s: no committed metadata: %s", self.group_id, exc)
                    return
                starts = self._on_assign({(tp.topic, tp.partition): tp.metadata or "" for tp in committed})
                if starts:  # assigned here, so not by librdkafka after this
                    self._consumer.incremental_assign(
                        [
                            TopicPartition(p.topic, p.partition, starts.get((p.topic, p.partition), OFFSET_INVALID))
                            for p in partitions
                        ]
                    )

        self._consumer.subscribe(list(topics), on_revoke=revoked, on_assign=assigned)

    def assign(self, offsets: PartitionOffsets) -> None:
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])

    def add_partitions(self, offsets: PartitionOffsets) -> None:
        """Reads these partitions too, from these offsets (assigned by hand: no group membership)."""
        self._consumer.incremental_assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])

    def remove_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._consumer.incremental_unassign([TopicPartition(t, p) for t, p in partitions])

    def partition_counts(self, timeout: float = 5.0) -> dict[str, int]:
        """Every topic's number of partitions, from one metadata request."""
        try:
            topics = self._consumer.list_topics(timeout=timeout).topics
        except KafkaException as exc:
            raise BrokerUnavailable(f"reading the topics' metadata failed: {exc}") from exc
        return {name: len(topic.partitions) for name, topic in topics.items() if topic.error is None}

    def poll(self, max_messages: int = 500, timeout: float = 0.1, max_bytes: int | None = None) -> list[Message]:
        """Up to ``max_messages`` records, and about ``max_bytes`` of values at most. Sizes are known only once
        taken, so with a byte bound it takes as many more as fit at the largest size seen so far, and never more
        than it took already (1, 1, 2, 4...): a run of small records cannot open the door to many large ones."""
        # consume() waits for a full batch or the timeout: wait for one record only, then take what is queued,
        # so a message read alone is handed over at once instead of after the timeout.
        records = self._consumer.consume(num_messages=1, timeout=timeout)
        sizes = [len(r.value() or b"") for r in records] if max_bytes is not None else []
        while records and len(records) < max_messages:
            wanted = max_messages - len(records)
            if max_bytes is not None:
                left = max_bytes - sum(sizes)
                if left <= 0:
                    break
                wanted = min(wanted, len(records), max(1, left // max(*sizes, 1)))
            more = self._consumer.consume(num_messages=wanted, timeout=0)
            if not more:
                break
            records += more
            if max_bytes is not None:
                sizes += [len(r.value() or b"") for r in more]
        out = []
        for record in records:
            err = record.error()
            if err is None:
                out.append(to_message(record))
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer %s: %s", self.group_id, err.str())
        return out

    def poll_with_headers(self, max_messages: int = 500, timeout: float = 0.1) -> list[tuple[Message, dict[str, Any]]]:
        """``poll``, each message with its record's headers by name (of a header given twice, the last)."""
        out = []
        for record in self._consumer.consume(num_messages=max_messages, timeout=timeout):
            err = record.error()
            if err is None:
                out.append((to_message(record), dict(record.headers() or ())))
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer %s: %s", self.group_id, err.str())
        return out

    def commit(self, offsets: PartitionOffsets, notes: Mapping[tuple[str, int], str] | None = None) -> None:
        """Commits ``offsets`` (the *next* offset to read, per partition) synchronously, each with its ``notes``
        (the commit's metadata)."""
        if not offsets:
            return
        notes = notes or {}
        try:
            self._consumer.commit(
                offsets=[TopicPartition(t, p, o, metadata=notes.get((t, p), "")) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            raise BrokerUnavailable(f"committing offsets of {self.group_id} failed: {exc}") from exc

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._consumer.seek(TopicPartition(topic, partition, offset))

    def pause(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._consumer.pause([TopicPartition(t, p) for t, p in partitions])

    def resume(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._consumer.resume([TopicPartition(t, p) for t, p in partitions])

    def lag(self, committed: PartitionOffsets) -> int | None:
        """Messages of the assigned partitions after their ``committed`` offset (else the read position), up to
        each partition's end as the last fetch saw it: no request to the broker. None when librdkafka cannot tell
        (the assignment changing under it): a metric must not stop the consumer."""
        total = 0
        try:
            assigned = self._consumer.assignment()
            for tp in self._consumer.position(assigned) if assigned else []:
                watermarks = self._consumer.get_watermark_offsets(tp, cached=True)
                start = committed.get((tp.topic, tp.partition), tp.offset)
                if watermarks is not None and watermarks[1] >= 0 and start >= 0:
                    total += max(0, watermarks[1] - start)
        except KafkaException as exc:
            log.debug("consumer %s: no lag now: %s", self.group_id, exc)
            return None
        return total

    def ends(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Each partition's end as this consumer's last fetch of it saw it (no request to the broker); partitions
        it does not read are left out."""
        out = {}
        for topic, partition in partitions:
            try:
                watermarks = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            except KafkaException:
                continue
            if watermarks is not None and watermarks[1] >= 0:
                out[(topic, partition)] = watermarks[1]
        return out

    def assignment(self) -> list[tuple[str, int]]:
        return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    def close(self) -> None:
        """Leaves the group at once: its partitions go to the other members without waiting for a timeout."""
        self._consumer.close()

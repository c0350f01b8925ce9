"""Reading a range of one partition's records as they are (key, value, every header, timestamp), outside any
consumer group: for Hermes' own topics whose records carry more than a message (dead letters)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from hermes.broker.connection import KafkaConnection
from hermes.errors import BrokerUnavailable


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes | None]]
    timestamp: int  # epoch millis


def read_records(
    connection: KafkaConnection, topic: str, partition: int, start: int, end: int, limit: int, timeout: float = 10.0
) -> list[Record]:
    """Up to ``limit`` records of the partition from offset ``start`` up to (not including) ``end``, of those it still
    holds; BrokerUnavailable when they do not all come within ``timeout`` seconds."""
    if start >= end or limit <= 0:
        return []
    consumer = Consumer(
        connection.config(
            **{
                "group.id": "hermes-records",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
    )
    try:
        # within what the partition holds: records below its first one (deleted) never come
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)
        start, end = max(start, low), min(end, high)
        if start >= end:
            return []
        consumer.assign([TopicPartition(topic, partition, start)])
        found: list[Record] = []
        position = start
        deadline = time.monotonic() + timeout
        while position < end and len(found) < limit:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"reading {topic}/{partition} from offset {position} timed out")
            for record in consumer.consume(num_messages=min(500, limit - len(found)), timeout=0.2):
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise BrokerUnavailable(f"reading {topic}/{partition} failed: {error.str()}")
                offset = record.offset() or 0  # a record without an error has one
                position = offset + 1
                if offset >= end or len(found) >= limit:
                    break
                raw = record.headers() or []
                headers = [(name, _bytes(v)) for name, v in (raw.items() if isinstance(raw, dict) else raw)]
                value = _bytes(record.value()) or b""
                found.append(Record(offset, _bytes(record.key()), value, headers, record.timestamp()[1]))
        return found
    except KafkaException as exc:
        raise BrokerUnavailable(f"reading {topic}/{partition} failed: {exc}") from exc
    finally:
        consumer.close()


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value

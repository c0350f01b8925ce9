"""The benchmark's Kafka ceiling: a plain confluent-kafka producer and consumer loop with nothing of Hermes
around it (it lives here because only ``hermes.broker`` imports confluent_kafka)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection


def produce_consume(bootstrap: str, messages: int, size: int, partitions: int = 2) -> dict[str, Any]:
    """Produces ``messages`` values of ``size`` bytes (acks=1, as Hermes' default ack) to a new topic, then
    reads them back in a new consumer group; both rates in messages/s."""
    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    admin = BrokerAdmin(KafkaConnection(bootstrap))
    admin.create_topic(topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 1, "enable.idempotence": False})
    value = b"x" * size
    acked = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal acked
        acked += err is None

    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    produced = time.perf_counter() - started

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    read = 0
    first: float | None = None
    deadline = time.monotonic() + 120
    while read < acked and time.monotonic() < deadline:
        batch = consumer.consume(num_messages=500, timeout=0.5)
        if batch and first is None:
            first = time.perf_counter()
        read += sum(1 for m in batch if m.error() is None)
    consumed = time.perf_counter() - (first or time.perf_counter())
    consumer.close()
    admin.delete_topic(topic)
    return {
        "messages": messages,
        "acked": acked,
        "read": read,
        "produce_rate": round(acked / produced, 1) if produced > 0 else 0.0,
        "consume_rate": round(read / consumed, 1) if consumed > 0 else 0.0,
    }

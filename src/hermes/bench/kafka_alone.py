"""The benchmark's Kafka ceilings, with nothing of Hermes around them: a produce-then-consume throughput loop,
and the publish-to-consume latency of the broker alone at a fixed rate, beside Hermes' publish-to-deliver
latency. The one module outside ``hermes.broker`` that imports confluent_kafka: it measures the plain client."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
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
    admin.close()
    return {
        "messages": messages,
        "acked": acked,
        "read": read,
        "produce_rate": round(acked / produced, 1) if produced > 0 else 0.0,
        "consume_rate": round(read / consumed, 1) if consumed > 0 else 0.0,
    }


@dataclass(frozen=True)
class LatencyRun:
    """One fixed-rate run through Kafka alone, over all its consumers."""

    acked: int  # messages the broker acknowledged (each consumer should read every one)
    latencies: list[float]  # seconds from each message's scheduled send to its first arrival at a consumer
    missing: int  # acknowledged messages some consumer never read, counted per consumer
    duplicates: int


_PROBE = b"probe"  # the key of warm-up messages, which no run counts


class _Reader:
    """A plain consumer in a group of its own, polled by a thread that records each arrival's key and time."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.arrivals: list[tuple[bytes, float]] = []
        self.probed = threading.Event()
        self._stop = threading.Event()
        # librdkafka's defaults are the consumers' own settings (fetch wait 500 ms: Kafka answers a fetch when
        # data arrives); the prefetch bound and session timeout are Hermes'
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "latest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "queued.max.messages.kbytes": 8192,
            }
        )
        self._consumer.subscribe([topic])
        self._thread = threading.Thread(target=self._loop, name=f"raw-{group}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.1)  # one message: poll hands it over as soon as it is fetched
            if message is None or message.error() is not None:
                continue
            at = time.monotonic()
            key = message.key() or b""
            if key == _PROBE:
                self.probed.set()
            else:
                self.arrivals.append((key, at))
        self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def fanout_latency(
    bootstrap: str, consumers: int, rate: float, seconds: float, reps: int, size: int, partitions: int = 2
) -> list[LatencyRun]:
    """The broker-alone latency at a fixed rate: one producer (acks=1, linger 1 ms, as Hermes' frontend) sends
    ``size``-byte messages at ``rate`` msg/s for ``seconds`` to a new topic of ``partitions``, read by
    ``consumers`` plain consumers each in a group of its own (as each Hermes subscription is). Latency counts
    from each message's scheduled send, so a late producer is charged to the broker, as Hermes' generator is."""
    topic = f"bench-rawlat-{uuid.uuid4().hex[:8]}"
    admin = BrokerAdmin(KafkaConnection(bootstrap))
    admin.create_topic(topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 1, "enable.idempotence": False})
    readers: list[_Reader] = []
    try:
        for i in range(consumers):  # one by one, so that those started are stopped if one fails
            readers.append(_Reader(bootstrap, topic, f"{topic}-{i}"))
        _warm_up(producer, topic, partitions, readers)
        return [_latency_run(producer, topic, readers, rate, seconds, b"x" * size, f"{rep}-") for rep in range(reps)]
    finally:
        for reader in readers:
            reader.stop()
        producer.flush(10)
        admin.delete_topic(topic)
        admin.close()


def _warm_up(producer: Producer, topic: str, partitions: int, readers: list[_Reader], within: float = 90.0) -> None:
    """Produces probes to every partition until every consumer read one: each has joined its group and fetches
    from the end, and the producer has sent to each partition."""
    deadline = time.monotonic() + within
    while not all(r.probed.is_set() for r in readers):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the raw consumers did not all start reading within {within:.0f} s")
        for partition in range(partitions):
            producer.produce(topic, b"{}", key=_PROBE, partition=partition)
        producer.poll(0)
        time.sleep(0.2)
    producer.flush(10)
    time.sleep(0.5)  # the last probes land before the run


def _latency_run(
    producer: Producer, topic: str, readers: list[_Reader], rate: float, seconds: float, value: bytes, prefix: str
) -> LatencyRun:
    for reader in readers:
        reader.arrivals = []
    scheduled: dict[bytes, float] = {}
    acked: set[bytes] = set()

    def on_delivery(err: Any, message: Any) -> None:
        if err is None:
            acked.add(message.key())

    start = time.monotonic() + 0.05
    for i in range(int(rate * seconds)):
        at = start + i / rate
        while (wait := at - time.monotonic()) > 0:
            producer.poll(wait)  # serves the acks while waiting for the next send
        key = f"{prefix}{i}".encode()
        scheduled[key] = at
        producer.produce(topic, value, key=key, on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(len(r.arrivals) < len(acked) for r in readers):
        time.sleep(0.05)
    latencies: list[float] = []
    missing = duplicates = 0
    for reader in readers:
        seen: set[bytes] = set()
        for key, arrived in reader.arrivals:
            if key in seen:
                duplicates += 1
            elif key in scheduled:
                seen.add(key)
                latencies.append(arrived - scheduled[key])
        missing += len(acked - seen)
    return LatencyRun(len(acked), latencies, missing, duplicates)

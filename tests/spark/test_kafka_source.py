"""The hermes-kafka streaming source on its own, against the real broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from tests.conftest import wait_until
from tests.support.hermes import unique


def create_topic(kafka: EmbeddedBroker, partitions: int = 3) -> str:
    topic = unique("src")
    BrokerAdmin(KafkaConnection(kafka.bootstrap_servers)).create_topic(topic, partitions)
    return topic


def produce(kafka: EmbeddedBroker, topic: str, values: range) -> list[str]:
    """Produces ``<topic>-<i>`` for each i, keyed so they spread over partitions, in multi-record batches."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 20})
    for i in values:
        producer.produce(topic, value=f"{topic}-{i}".encode(), key=f"k{i % 5}".encode(), headers=[("n", str(i))])
    assert producer.flush(30) == 0
    return [f"{topic}-{i}" for i in values]


class BatchRecorder:
    """A foreachBatch sink keeping each batch's values by batch id: a replayed batch replaces itself, so the
    union shows exactly what the source planned, gaps and duplicates included."""

    def __init__(self) -> None:
        self.batches: dict[int, list[str]] = {}

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.batches[batch_id] = [row.value.decode() for row in frame.select("value").collect()]

    def values(self) -> list[str]:
        return [value for batch_id in sorted(self.batches) for value in self.batches[batch_id]]


def run(spark: Any, kafka: EmbeddedBroker, topics: str, checkpoint: Path, sink: Any, **options: str) -> Any:
    """Runs the source to the end of what is available now and returns the finished query."""
    reader = spark.readStream.format("hermes-kafka").option("bootstrap.servers", kafka.bootstrap_servers)
    frame = reader.option("topics", topics).options(**options).load()
    query = frame.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    started = query.trigger(availableNow=True).start()
    assert started.awaitTermination(120), "the availableNow query did not finish"
    assert started.exception() is None
    return started


def test_reads_every_record_once_within_max_records_per_batch(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = create_topic(kafka)
    expected = produce(kafka, topic, range(24))
    sink = BatchRecorder()

    query = run(spark, kafka, topic, tmp_path / "checkpoint", sink, maxRecordsPerBatch="6")

    assert sorted(sink.values()) == sorted(expected)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 24
    assert max(sizes) <= 6
    assert len(sizes) >= 4


def test_rows_carry_every_kafka_field(spark: Any, kafka: EmbeddedBroker) -> None:
    topic = create_topic(kafka, partitions=1)
    produce(kafka, topic, range(3))
    frame = (
        spark.readStream.format("hermes-kafka")
        .option("bootstrap.servers", kafka.bootstrap_servers)
        .option("topics", topic)
        .load()
    )
    name = unique("rows")
    query = frame.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    assert query.awaitTermination(120)
    rows = spark.sql(f"select * from {name} order by offset").collect()

    assert [(r.topic, r.partition, r.offset) for r in rows] == [(topic, 0, 0), (topic, 0, 1), (topic, 0, 2)]
    assert [r.key for r in rows] == [b"k0", b"k1", b"k2"]
    assert [r.value.decode() for r in rows] == [f"{topic}-{i}" for i in range(3)]
    assert [[(h.key, h.value) for h in r.headers] for r in rows] == [[("n", b"0")], [("n", b"1")], [("n", b"2")]]
    assert all(r.timestamp is not None for r in rows)


def test_restart_from_checkpoint_has_no_gap_and_no_duplicate(spark: Any, kafka: EmbeddedBroker, tmp_path: Path) -> None:
    topic = create_topic(kafka)
    checkpoint = tmp_path / "checkpoint"
    expected = produce(kafka, topic, range(30))
    sink = BatchRecorder()
    frame = (
        spark.readStream.format("hermes-kafka")
        .option("bootstrap.servers", kafka.bootstrap_servers)
        .option("topics", topic)
        .option("maxRecordsPerBatch", "4")
        .load()
    )
    query = (
        frame.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    wait_until(lambda: len(sink.batches) >= 3, timeout=120)
    query.stop()  # mid-stream: at most 4 records per batch, 30 records waiting
    assert len(sink.values()) < 30
    expected += produce(kafka, topic, range(30, 50))

    run(spark, kafka, topic, checkpoint, sink, maxRecordsPerBatch="4")

    assert len(sink.values()) == len(set(sink.values())), "a record was read twice"
    assert sorted(sink.values()) == sorted(expected)


def test_a_topic_added_across_a_restart_is_read_from_earliest(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    """Tansu cannot add partitions to a topic (no CreatePartitions), so new partitions are shown by a new
    topic in the source's list: its partitions are unknown to the checkpoint, like added partitions."""
    first, second = create_topic(kafka), create_topic(kafka, partitions=2)
    checkpoint = tmp_path / "checkpoint"
    sink = BatchRecorder()
    first_values = produce(kafka, first, range(10))
    second_values = produce(kafka, second, range(12))  # already there before the source knows the topic
    run(spark, kafka, first, checkpoint, sink)
    assert sorted(sink.values()) == sorted(first_values)

    first_values += produce(kafka, first, range(10, 15))
    run(spark, kafka, f"{first},{second}", checkpoint, sink)

    assert len(sink.values()) == len(set(sink.values()))
    assert sorted(sink.values()) == sorted(first_values + second_values)


def test_starting_offsets_latest_skips_what_was_there(spark: Any, kafka: EmbeddedBroker, tmp_path: Path) -> None:
    topic = create_topic(kafka, partitions=2)
    produce(kafka, topic, range(10))
    sink = BatchRecorder()
    run(spark, kafka, topic, tmp_path / "checkpoint", sink, startingOffsets="latest")
    assert sink.values() == []

    later = produce(kafka, topic, range(10, 16))
    run(spark, kafka, topic, tmp_path / "checkpoint", sink)

    assert sorted(sink.values()) == sorted(later)

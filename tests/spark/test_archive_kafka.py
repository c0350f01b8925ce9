"""The archive's reading of Kafka with Spark's connector, against the real broker: restarts from the checkpoint,
partitions and topics that appear, topics switched off and on, and the lake columns taken from Kafka headers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.config import load_settings
from hermes.domain.message import KAFKA_MESSAGE_ID, KAFKA_PROPAGATED_PREFIX, KAFKA_SCHEMA_VERSION
from hermes.pipeline.archive_positions import POSITIONS_FILE
from hermes.pipeline.connector import KAFKA_FORMAT, kafka_options
from hermes.pipeline.lake import PARTITION_COLUMNS, Lake, read_lake
from hermes.pipeline.offline_storage import ArchiveJob, archive_checkpoint, lake_rows, start_archive
from hermes.pipeline.runner import PipelineContext
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes, unique
from tests.support.pipeline import archive, archive_context, lake_count, pipeline_context, produce_at

ARCHIVED = {"offlineStorage": {"enabled": True}}


def archived_ids(spark: Any, lake: Lake, topic: str | None = None) -> list[str]:
    return [r.message_id for r in read_lake(spark, lake, topic).select("message_id").collect()]


def test_a_stopped_archive_resumes_from_its_checkpoint_with_no_gap_and_no_duplicate(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    topic, now = unique("g.resume"), datetime.now(UTC)
    lake = Lake(str(tmp_path / "lake"))
    context = archive_context(spark, kafka, lake, tmp_path / "ckpt", max_records_per_batch=4)
    expected = produce_at(kafka, topic, [now] * 30)  # on 2 partitions
    query = start_archive(context, [topic])
    wait_until(lambda: lake_count(spark, lake) >= 8, timeout=120, interval=0.2)
    query.stop()  # mid-stream: at most 4 records a batch, 30 waiting
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert lake_count(spark, lake) < 30 and max(sizes) <= 4
    expected += produce_at(kafka, topic, [now] * 10)

    # the rest in one batch: what counts is where it resumes, not how many batches it takes
    resumed = archive_context(spark, kafka, lake, tmp_path / "ckpt")
    start_archive(resumed, [topic], {"availableNow": True}).awaitTermination(120)

    ids = archived_ids(spark, lake)
    assert len(ids) == len(set(ids)), "a message archived twice"
    assert sorted(ids) == sorted(expected)


@pytest.mark.parametrize("writer", ["this version", "Delta's streaming sink (earlier versions)"])
def test_a_replayed_batch_the_lake_holds_already_is_skipped(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path, writer: str
) -> None:
    """A crash after the lake committed a batch and before the checkpoint recorded it: the next start replays
    the batch, and finds it in the lake (marked by this version, or by the sink earlier versions used)."""
    topic, now = unique("g.replay"), datetime.now(UTC)
    lake = Lake(str(tmp_path / "lake"))
    context = archive_context(spark, kafka, lake, tmp_path / "ckpt")
    expected = produce_at(kafka, topic, [now] * 10)
    if writer == "this version":
        start_archive(context, [topic], {"availableNow": True}).awaitTermination(120)
    else:
        (
            lake_rows(context, [topic])
            .writeStream.format("delta")
            .option("path", lake.root)
            .option("checkpointLocation", archive_checkpoint(context))
            .partitionBy(*PARTITION_COLUMNS)
            .trigger(availableNow=True)
            .start()
            .awaitTermination(120)
        )
    assert lake_count(spark, lake) == 10
    commits = sorted((tmp_path / "ckpt" / "archive" / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
    # the checkpoint forgets the last batch was done (and Hadoop's checksum of that file): planned, not committed
    commits[-1].unlink()
    (commits[-1].parent / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    expected += produce_at(kafka, topic, [now] * 5)

    start_archive(context, [topic], {"availableNow": True}).awaitTermination(120)

    ids = archived_ids(spark, lake)
    assert len(ids) == len(set(ids)), "a replayed batch archived twice"
    assert sorted(ids) == sorted(expected)


def test_partitions_added_while_archiving_are_read_from_their_start(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    topic, now = unique("g.grows"), datetime.now(UTC)
    lake = Lake(str(tmp_path / "lake"))
    expected = produce_at(kafka, topic, [now] * 4)
    query = start_archive(archive_context(spark, kafka, lake, tmp_path / "ckpt"), [topic])
    try:
        wait_until(lambda: lake_count(spark, lake) >= 4, timeout=120, interval=0.2)
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
        expected += produce_at(kafka, topic, [now] * 3, partition=2) + produce_at(kafka, topic, [now], partition=3)
        wait_until(lambda: lake_count(spark, lake) >= 8, timeout=60, interval=0.2)
    finally:
        query.stop()

    rows = read_lake(spark, lake).collect()
    assert sorted(r.message_id for r in rows) == sorted(expected)
    assert sorted((r.partition, r.offset) for r in rows if r.partition >= 2) == [(2, 0), (2, 1), (2, 2), (3, 0)]


def test_a_topic_added_across_a_restart_is_read_from_its_earliest_offset(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    first, second, now = unique("g.first"), unique("g.second"), datetime.now(UTC)
    lake, checkpoints = Lake(str(tmp_path / "lake")), tmp_path / "ckpt"
    expected = produce_at(kafka, first, [now] * 5)
    later = produce_at(kafka, second, [now] * 6)  # there before the archive reads it
    archive(spark, kafka, lake, checkpoints, [first], 5)
    expected += produce_at(kafka, first, [now] * 2)

    archive(spark, kafka, lake, checkpoints, [first, second], 13)

    ids = archived_ids(spark, lake)
    assert len(ids) == len(set(ids)) == 13
    assert sorted(ids) == sorted(expected + later)


def test_lake_columns_come_from_the_frontends_kafka_headers(spark: Any, kafka: EmbeddedBroker, tmp_path: Path) -> None:
    topic = unique("g.columns")
    published = datetime.now(UTC) - timedelta(days=2)
    hermes_id = produce_at(kafka, topic, [published], partition=0)[0]
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(
        topic,
        value=b"\x02avro",
        key=b"key-1",
        partition=0,
        headers=[
            (KAFKA_MESSAGE_ID, "avro-1"),
            (KAFKA_SCHEMA_VERSION, "3"),
            (KAFKA_PROPAGATED_PREFIX + "Trace-Id", "t-1"),
            ("other", "x"),
        ],
    )
    producer.produce(topic, value=b"foreign", partition=0)  # not from a Hermes frontend: no headers
    placeholder = b'{"url": "http://127.0.0.1/offload/msg/m"}'  # of an offloaded large message: archived as it is
    producer.produce(topic, value=placeholder, partition=0, headers=[(KAFKA_MESSAGE_ID, "m"), ("_format", "external")])
    # a header given twice: the last counts, as for hermes.domain.message.parse_kafka_headers
    producer.produce(topic, value=b"twice", partition=0, headers=[(KAFKA_MESSAGE_ID, "t-1"), (KAFKA_MESSAGE_ID, "t-2")])
    # a CloudEvent, as the frontend writes one (the CloudEvents Kafka binding): its attributes are kept as they are
    event = [("ce_id", "order-1"), ("ce_specversion", "1.0"), ("content-type", "text/plain")]
    producer.produce(topic, value=b"event", partition=0, headers=[(KAFKA_MESSAGE_ID, "e"), *event])
    assert producer.flush(30) == 0
    lake = Lake(str(tmp_path / "lake"))

    archive(spark, kafka, lake, tmp_path / "ckpt", [topic], 6)

    first, avro, foreign, offloaded, twice, cloud_event = sorted(
        read_lake(spark, lake).collect(), key=lambda r: r.offset
    )
    assert (offloaded.body, offloaded.headers) == (placeholder, {"_format": "external"})
    assert (cloud_event.body, cloud_event.headers) == (b"event", dict(event))
    assert (twice.message_id, twice.headers) == ("t-2", {})
    assert (first.message_id, first.publish_timestamp.replace(tzinfo=UTC)) == (
        hermes_id,
        published.replace(microsecond=published.microsecond // 1000 * 1000),
    )
    assert (first.hour, first.headers) == (published.strftime("%Y-%m-%d-%H"), {})
    assert (avro.message_id, avro.key, avro.schema_version, avro.headers, avro.body) == (
        "avro-1",
        b"key-1",
        3,
        {"Trace-Id": "t-1"},
        b"\x02avro",
    )
    assert (foreign.message_id, foreign.schema_version, foreign.headers) == (f"{topic}-0-2", None, {})
    assert abs(foreign.publish_timestamp.replace(tzinfo=UTC) - datetime.now(UTC)) < timedelta(minutes=5)
    for file in Path(lake.root).rglob("*.parquet"):  # body without a dictionary or min/max (pipeline.session)
        chunks = pq.ParquetFile(file).metadata.row_group(0)
        body, message_id = (
            next(chunks.column(i) for i in range(chunks.num_columns) if chunks.column(i).path_in_schema == name)
            for name in ("body", "message_id")
        )
        assert not body.has_dictionary_page and not (body.statistics and body.statistics.has_min_max)
        assert message_id.statistics.has_min_max


def test_the_sasl_password_stays_out_of_query_plans(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = load_settings(
        {
            "data_dir": tmp_path,
            "kafka_security_protocol": "SASL_PLAINTEXT",
            "kafka_sasl_mechanism": "PLAIN",
            "kafka_sasl_username": "hermes",
            "kafka_sasl_password": "pa55-w0rd",
        }
    )
    options = kafka_options(KafkaConnection.from_settings(settings, "127.0.0.1:9"), ["g.secret"])

    spark.readStream.format(KAFKA_FORMAT).options(**options).load().explain(True)

    plans = capsys.readouterr().out
    assert "kafka.sasl.jaas.config=*********(redacted)" in plans
    assert "pa55-w0rd" not in plans


@pytest.fixture
def context(spark: Any, hermes: InProcessHermes, tmp_path_factory: pytest.TempPathFactory) -> PipelineContext:
    return pipeline_context(spark, hermes, tmp_path_factory)


@pytest.fixture
def archive_job(context: PipelineContext) -> Iterator[list[ArchiveJob]]:
    """The archive jobs a test starts (appended by the test), stopped at its end."""
    jobs: list[ArchiveJob] = []
    yield jobs
    for job in jobs:
        job.stop()


def test_a_topic_switched_off_and_on_again_continues_where_it_stopped(
    context: PipelineContext, client: HermesClient, archive_job: list[ArchiveJob]
) -> None:
    spark, lake = context.spark, context.lake
    kept, switched = client.create_topic(**ARCHIVED), client.create_topic(**ARCHIVED)
    published: dict[str, list[str]] = {kept: [], switched: []}

    def publish(topic: str, n: int) -> None:
        for i in range(n):
            response = client.publish(topic, f'{{"n": {i}}}')
            assert response.status_code in (201, 202), response.text
            published[topic].append(response.headers["Hermes-Message-Id"])

    def count(topic: str) -> int:
        return lake_count(spark, lake, topic)

    publish(kept, 3)
    publish(switched, 3)
    archive_job.append(ArchiveJob(context))
    archive_job[0].start()
    wait_until(lambda: count(kept) + count(switched) >= 6, timeout=120, interval=0.3)
    archive_job[0].stop()
    # As if the pipeline had been killed between planning a batch and committing it: the next start must commit
    # that batch (it holds the switched topic) before it drops the topic.
    checkpoint = Path(context.checkpoints) / "archive"
    batch = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    newest = checkpoint / "commits" / str(batch)
    for commit in (newest, newest.with_name(f".{batch}.crc")):
        commit.unlink(missing_ok=True)
    assert client.management.put(f"/topics/{switched}", json={"offlineStorage": {"enabled": False}}).status_code == 200
    publish(kept, 2)
    publish(switched, 4)  # while it is off: archived once it is switched on again

    archive_job.append(ArchiveJob(context))
    archive_job[1].start()
    wait_until(lambda: count(kept) >= 5, timeout=120, interval=0.3)
    assert newest.exists(), "the pending batch was committed"
    positions = json.loads((checkpoint / POSITIONS_FILE).read_text())
    assert list(positions) == [switched] and sum(positions[switched]["offsets"].values()) == 3
    assert count(switched) == 3
    assert client.management.put(f"/topics/{switched}", json={"offlineStorage": {"enabled": True}}).status_code == 200
    wait_until(lambda: count(switched) >= 7, timeout=120, interval=0.3)

    for topic, ids in published.items():
        archived = archived_ids(spark, lake, topic)
        assert len(archived) == len(set(archived)), "a message archived twice"
        assert sorted(archived) == sorted(ids)

"""Tracking analytics end to end: Hermes writes trace events, the Spark tracking job materializes them, the
management API reads them back (trace, undelivered, per-minute statistics)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.domain.trace import TRACKING_TOPIC, TraceEvent, TraceStatus
from hermes.pipeline.connector import kafka_options
from hermes.pipeline.traces import TRACES, TrackingStore, checkpoint_root, table_files, tracking_root
from hermes.pipeline.tracking_job import (
    STATISTICS_APP_ID,
    TrackingJob,
    maintain_traces,
    optimize_traces,
    start_tracking,
    write_statistics,
)
from hermes.pipeline.tracking_migration import migrate_tracking
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.pipeline import pipeline_context
from tests.support.subscriber import Reply, SubscriberServer

PROGRESS = "Hermes-Tracking-Progress"
FAST = {"messageBackoff": 100, "messageTtl": 60, "requestTimeout": 10_000}


@pytest.fixture(scope="module")
def tracking_job(spark: Any, hermes: InProcessHermes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The pipeline's tracking job, as ``hermes pipeline`` runs it (statistics every 2 s here), warmed up: the
    first micro-batches of a cold query and the first write of each Delta table take many seconds (Python
    workers start, the table is created), so a first tracked delivery goes all the way through both tables
    before the tests measure anything."""
    # the checkpoints where management looks for the job's progress
    checkpoints = checkpoint_root(hermes.hermes.settings)
    job = TrackingJob(pipeline_context(spark, hermes, tmp_path_factory, checkpoints, pipeline_statistics_trigger=2.0))
    job.start()
    root = tracking_root(hermes.hermes.settings)
    api = HermesClient(hermes.management_url, hermes.frontend_url)
    subscriber = scripted(lambda _n, _r: Reply(200))
    try:
        topic = api.create_topic(trackingEnabled=True)
        sub = api.create_subscription(topic, subscriber.url, trackingMode="trackingAll", subscriptionPolicy=FAST)
        message_id = api.publish(topic, "{}").headers["Hermes-Message-Id"]
        wait_until(lambda: len(TrackingStore(root).trace(topic, sub, message_id)) == 4, 180, 0.5)
        wait_until(lambda: [m["delivered"] for m in TrackingStore(root).statistics(topic, sub, 0)] == [1], 60, 0.5)
        yield root
    finally:
        subscriber.stop()
        api.close()
        job.stop()


def scripted(script: Any) -> SubscriberServer:
    return SubscriberServer(script).start()


def test_the_trace_of_a_retried_message_is_served_within_ten_seconds(tracking_job: Path, client: HermesClient) -> None:
    subscriber = scripted(lambda n, _r: Reply(500 if n == 0 else 200))
    try:
        topic = client.create_topic(trackingEnabled=True)
        sub = client.create_subscription(topic, subscriber.url, trackingMode="trackingAll", subscriptionPolicy=FAST)
        message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]
        subscriber.wait_for(2, timeout=30)
        delivered_at = time.monotonic()
        path = f"/topics/{topic}/subscriptions/{sub}/events/{message_id}/trace"

        def trace() -> list[dict[str, Any]]:
            response = client.management.get(path)
            assert response.status_code == 200, response.text
            return response.json()  # type: ignore[no-any-return]

        wait_until(lambda: [e["status"] for e in trace()][-1:] == ["SUCCESS"] and len(trace()) == 5, 10, 0.2)
        assert time.monotonic() - delivered_at <= 10
        events = trace()
        assert [(e.get("subscription"), e["status"]) for e in events] == [
            (None, "INFLIGHT"),
            (None, "SUCCESS"),
            (sub, "INFLIGHT"),
            (sub, "FAILED"),
            (sub, "SUCCESS"),
        ]
        assert all(e["messageId"] == message_id and e["topicName"] == topic for e in events)
        assert [e["timestamp"] for e in events] == sorted(e["timestamp"] for e in events)
        assert "500" in events[3]["reason"] and isinstance(events[4]["offset"], int)

        stats_path = f"/topics/{topic}/subscriptions/{sub}/statistics"
        # FAILED and SUCCESS may reach the statistics in different micro-batches: wait for the delivery
        wait_until(lambda: [m["delivered"] for m in client.management.get(stats_path).json()] == [1], 30, 0.5)
        (minute,) = client.management.get(stats_path).json()
        assert (minute["delivered"], minute["discarded"], minute["failedAttempts"]) == (1, 0, 1)
        assert 0 < minute["latency"]["p50"] == minute["latency"]["max"] < 30_000
        assert minute["minute"] % 60_000 == 0 and minute["minute"] <= events[4]["timestamp"] < minute["minute"] + 60_000
    finally:
        subscriber.stop()


def test_undelivered_lists_the_discarded_messages_newest_first(tracking_job: Path, client: HermesClient) -> None:
    subscriber = scripted(lambda _n, _r: Reply(500))
    try:
        topic = client.create_topic()
        policy = {**FAST, "messageTtl": 1}
        sub = client.create_subscription(topic, subscriber.url, trackingMode="discardedOnly", subscriptionPolicy=policy)
        path = f"/topics/{topic}/subscriptions/{sub}/undelivered"
        ids = []
        for n in range(2):
            ids.append(client.publish(topic, f'{{"n": {n}}}').headers["Hermes-Message-Id"])
            wait_until(lambda n=n: len(client.management.get(path).json()) == n + 1, 20, 0.2)
        undelivered = client.management.get(path).json()
        assert [e["messageId"] for e in undelivered] == ids[::-1]
        assert all(e["status"] == "DISCARDED" and e["subscription"] == sub for e in undelivered)
        assert all("500" in e["reason"] for e in undelivered)
        assert client.management.get(f"/topics/{topic}/subscriptions/{sub}/events/{ids[0]}/trace").json() == [
            undelivered[1]
        ], "discardedOnly: the trace holds just the discard"
    finally:
        subscriber.stop()


def test_the_answers_say_how_far_the_tracking_job_has_read(tracking_job: Path, client: HermesClient) -> None:
    topic = client.create_topic()
    base = f"/topics/{topic}/subscriptions/{client.create_subscription(topic, 'http://127.0.0.1:9/')}"
    # the warm-up's events were read, and nothing is tracked now: both queries have read the whole topic
    for path in (f"{base}/events/some-id/trace", f"{base}/undelivered", f"{base}/statistics"):
        wait_until(lambda p=path: client.management.get(p).headers[PROGRESS] == "caught-up", 60, 0.5)


def test_the_trace_table_is_partitioned_by_topic_and_date(tracking_job: Path) -> None:
    files = [Path(f) for f in table_files(tracking_job / TRACES)]
    assert files and all(f.parent.parent.name.startswith("topic=") for f in files)
    assert all(f.parent.name.startswith("date=") and len(f.parent.name) == len("date=2026-11-23") for f in files)


def test_a_replayed_statistics_batch_is_not_counted_twice(spark: Any, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    columns = "messageId STRING, timestamp BIGINT, topicName STRING, status STRING, subscription STRING, "
    events = spark.createDataFrame(
        [("m1", now, "g.t", "SUCCESS", "s", now - 5), ("m2", now, "g.t", "FAILED", "s", None)],
        columns + "publishTimestamp BIGINT",
    )
    store = TrackingStore(tmp_path)
    for batch_id in (0, 0, 1):  # batch 0 replayed after a crash, then the next batch
        write_statistics(events, batch_id, tmp_path / "delivery-statistics")
    (minute,) = store.statistics("g.t", "s", 0)
    assert (minute["delivered"], minute["failedAttempts"]) == (2, 2), "batches 0 and 1, each once"


def test_a_failed_start_leaves_no_query_behind(spark: Any, kafka: EmbeddedBroker, tmp_path: Path) -> None:
    # the statistics query cannot make its checkpoint directory: a file is in the way
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "statistics").write_text("")
    options = kafka_options(KafkaConnection(kafka.bootstrap_servers), [TRACKING_TOPIC], None)
    session = spark.newSession()  # query names are per session: the tracking job of the tests above uses them
    with pytest.raises(Exception, match="statistics"):
        start_tracking(session, options, tmp_path / "tables", str(tmp_path / "ckpt"))
    # the traces query started first was stopped again: nothing holds its name, so the next start can succeed
    assert session.streams.active == []


def test_optimize_keeps_every_event_in_fewer_files(spark: Any, tracking_job: Path, client: HermesClient) -> None:
    store = TrackingStore(tracking_job)
    topic = client.create_topic(trackingEnabled=True)
    ids = []
    for n in range(3):  # one at a time: separate micro-batches, separate files
        ids.append(client.publish(topic, f'{{"n": {n}}}').headers["Hermes-Message-Id"])
        wait_until(lambda m=ids[-1]: len(store.trace(topic, "any", m)) == 2, 30, 0.2)
    before = {m: store.trace(topic, "any", m) for m in ids}
    assert len(store.trace_files(topic)) >= 3
    assert optimize_traces(spark, tracking_job, datetime.now(UTC)) >= 3
    assert len(store.trace_files(topic)) == 1, "one file, clustered by message id, replaces the topic's files"
    assert {m: store.trace(topic, "any", m) for m in ids} == before


def test_tracking_tables_of_the_earlier_layout_move_into_the_delta_tables(spark: Any, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    day = datetime.now(UTC).strftime("%Y-%m-%d")

    text, long, integer = pa.string(), pa.int64(), pa.int32()
    types = {"messageId": text, "timestamp": long, "topicName": text, "status": text, "cluster": text}
    types |= {"subscription": text, "partition": integer, "offset": long, "reason": text, "publishTimestamp": long}
    schema = pa.schema([*types.items(), ("trackingPartition", integer), ("trackingOffset", long)])

    def events(*rows: tuple[str, str | None, int]) -> pa.Table:  # the earlier sink's files: every column
        values = [(m, now, "g.t", "SUCCESS", "c", sub, None, None, None, None, 0, offset) for m, sub, offset in rows]
        return pa.Table.from_pylist([dict(zip(schema.names, v, strict=True)) for v in values], schema)

    sink = tmp_path / TRACES / "topic=g.t" / f"date={day}"
    block = tmp_path / "traces-compacted" / "topic=g.t" / "block=1"
    for directory in (sink, block, tmp_path / TRACES / "_spark_metadata"):
        directory.mkdir(parents=True)
    pq.write_table(events(("a", None, 0), ("a", "s", 1)), sink / "part-0.parquet")
    pq.write_table(events(("b", None, 2)), sink / "part-1.parquet")
    pq.write_table(events(("a", None, 0), ("a", "s", 1), ("b", None, 2)), block / "part-0.parquet")  # replaces both
    (sink / "part-2.parquet").write_bytes(b"PAR1 cut short by a crash")
    statistics = tmp_path / "delivery-statistics" / "batch=7"
    statistics.mkdir(parents=True)
    partial = {"topicName": ["g.t"], "subscription": ["s"], "minute": [now // 60_000 * 60_000]}
    counts = {"delivered": [1], "discarded": [0], "failedAttempts": [0], "latencies": [[5]]}
    pq.write_table(pa.table({**partial, **counts}), statistics / "part-0.parquet")

    migrate_tracking(spark, tmp_path, STATISTICS_APP_ID)

    store = TrackingStore(tmp_path)
    assert [e.get("subscription") for e in store.trace("g.t", "s", "a")] == [None, "s"], "each event once"
    assert len(store.trace("g.t", "s", "b")) == 1
    assert not (tmp_path / "traces-compacted").exists() and not (tmp_path / TRACES / "_spark_metadata").exists()
    assert not any((tmp_path / "delivery-statistics").glob("batch=*"))
    assert [m["delivered"] for m in store.statistics("g.t", "s", 0)] == [1]
    replayed = spark.createDataFrame(
        [("m", now, "g.t", "SUCCESS", "s", now - 5)],
        "messageId STRING, timestamp BIGINT, topicName STRING, status STRING, subscription STRING, "
        "publishTimestamp BIGINT",
    )
    write_statistics(replayed, 7, tmp_path / "delivery-statistics")  # the checkpoint's replay of the last batch
    assert [m["delivered"] for m in store.statistics("g.t", "s", 0)] == [1]
    write_statistics(replayed, 8, tmp_path / "delivery-statistics")
    assert [m["delivered"] for m in store.statistics("g.t", "s", 0)] == [2]


# Last in this module: its short retention removes the other tests' traces too.
def test_retention_deletes_expired_days_and_minutes_and_vacuum_removes_their_files(
    spark: Any, tracking_job: Path, client: HermesClient, kafka: EmbeddedBroker
) -> None:
    store = TrackingStore(tracking_job)
    topic = client.create_topic(trackingEnabled=True)
    three_days_ago = datetime.now(UTC) - timedelta(days=3)
    old = str(uuid.uuid4())
    at = int(three_days_ago.timestamp() * 1000)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(TRACKING_TOPIC, TraceEvent(old, at, topic, TraceStatus.SUCCESS, "test-cluster").to_json())
    consumed = TraceEvent(old, at, topic, TraceStatus.SUCCESS, "test-cluster", subscription="s", publishTimestamp=at)
    producer.produce(TRACKING_TOPIC, consumed.to_json())
    assert producer.flush(30) == 0
    wait_until(lambda: len(store.trace(topic, "s", old)) == 2, 30, 0.2)
    wait_until(lambda: [m["delivered"] for m in store.statistics(topic, "s", 0)] == [1], 30, 0.2)
    recent = client.publish(topic, "{}").headers["Hermes-Message-Id"]
    wait_until(lambda: len(store.trace(topic, "any", recent)) == 2, 30, 0.2)
    old_day = tracking_job / TRACES / f"topic={topic}" / f"date={three_days_ago:%Y-%m-%d}"
    assert any(old_day.glob("*.parquet"))

    maintain_traces(spark, tracking_job, timedelta(days=1), timedelta(0))  # the job's pass, VACUUM keeping none

    assert store.trace(topic, "s", old) == [] and store.statistics(topic, "s", 0) == []
    assert not any(old_day.glob("*.parquet")), "VACUUM removed the deleted day's files"
    assert [e["status"] for e in store.trace(topic, "any", recent)] == ["INFLIGHT", "SUCCESS"]

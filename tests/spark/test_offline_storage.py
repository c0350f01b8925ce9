"""Offline storage on Delta Lake: the archive query, exactly once across a killed pipeline, retention (DELETE and
VACUUM), compaction (OPTIMIZE) and the conversion of a lake of the earlier Parquet layout."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes.broker.embedded import EmbeddedBroker
from hermes.pipeline.lake import PARTITION_COLUMNS, Lake, hour_of, lake_version, read_lake
from hermes.pipeline.lake_maintenance import convert_parquet_lake, delete_expired, optimize, vacuum
from hermes.pipeline.offline_storage import archive_checkpoint, lake_rows, start_archive
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes, unique
from tests.support.pipeline import (
    PipelineCommand,
    archive,
    archive_context,
    archived_rows,
    lake_count,
    lake_ids,
    pipeline_beside,
    produce_at,
)


@pytest.fixture
def pipeline(hermes: InProcessHermes, kafka: EmbeddedBroker, tmp_path: Path) -> Iterator[PipelineCommand]:
    # a retention pass every 5 s; VACUUM keeps unreferenced files 18 s: longer than any micro-batch here takes to
    # commit the files it writes
    retention = ("--pipeline-retention-interval", "5", "--pipeline-vacuum-retention-hours", "0.005")
    with pipeline_beside(hermes, kafka, tmp_path, *retention) as running:
        yield running


def test_a_killed_pipeline_archives_each_message_exactly_once(
    spark: Any, kafka: EmbeddedBroker, client: HermesClient, pipeline: PipelineCommand, tmp_path: Path
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    topic = client.create_topic(offlineStorage={"enabled": True, "retentionTime": {"duration": 7}})
    later = client.create_topic()  # offline storage off for now: not archived
    published: dict[str, tuple[str, int]] = {}

    def publish(n: int, to: str = topic) -> None:
        for _ in range(n):
            body = f'{{"n": "{uuid.uuid4()}"}}'
            before = int(time.time() * 1000)
            response = client.publish(to, body, headers={"Trace-Id": f"trace-{len(published)}"})
            assert response.status_code in (201, 202), response.text
            published[response.headers["Hermes-Message-Id"]] = (body, before)

    # partition 0's first message, so in the first batch: an hour past the topic's 7 days, which the running
    # pipeline's retention deletes and VACUUM removes the file of, 18 s after it was written (in the second run)
    nine_days_ago = datetime.now(UTC) - timedelta(days=9)
    [expired] = produce_at(kafka, topic, [nine_days_ago], partition=0)
    expired_hour = tmp_path / "lake" / f"topic={topic}" / f"hour={hour_of(nine_days_ago)}"
    publish(45)
    pipeline.start()
    # the first batch committed (the expired message may be deleted already): at most 15 records a batch, it is
    # mid-stream
    wait_until(lambda: lake_count(spark, lake) >= 10, timeout=120, interval=0.5)
    pipeline.kill()
    first_run = set(lake_ids(lake)) | {expired}  # the expired message was committed: in the lake, or deleted
    assert len(first_run) < 46
    assert any(expired_hour.glob("*.parquet"))
    publish(15)
    publish(15, to=later)
    pipeline.start()
    wait_until(lambda: lake_count(spark, lake, topic) >= 60, timeout=120, interval=1.0)
    assert pipeline.process is not None
    wait_until(lambda: "retention: deleted 1 messages" in pipeline.process.log(), timeout=90)  # either run's

    # a topic whose offline storage is switched on while the pipeline runs is archived from its beginning
    assert client.management.put(f"/topics/{later}", json={"offlineStorage": {"enabled": True}}).status_code == 200
    wait_until(lambda: lake_count(spark, lake, later) >= 15, timeout=120, interval=1.0)

    rows = archived_rows(lake, topic)  # without Spark: a session here would compete with the pipeline's
    ids = [r.message_id for r in rows]
    assert len(ids) == len(set(ids)) == 60, "each message exactly once"
    topic_ids = set(published) - set(lake_ids(lake, later))
    assert set(ids) == topic_ids
    assert expired not in ids
    assert len({(r.partition, r.offset) for r in rows}) == 60
    for row in rows:
        body, before = published[row.message_id]
        assert row.body.decode() == body
        assert row.topic == topic
        assert row.schema_version is None
        assert row.headers["Trace-Id"].startswith("trace-")
        published_ms = row.publish_timestamp.replace(tzinfo=UTC).timestamp() * 1000
        assert before <= published_ms <= before + 5000
        assert row.hour == hour_of(row.publish_timestamp.replace(tzinfo=UTC))
    assert lake_count(spark, lake, later) == 15
    wait_until(lambda: not any(expired_hour.glob("*.parquet")), timeout=90)

    status = f"http://127.0.0.1:{pipeline.process.pipeline_port}/status"
    assert httpx.get(f"{status}/health", timeout=10).status_code == 200

    def archived() -> float:
        metrics = httpx.get(f"{status}/prometheus", timeout=10).text
        found = re.search(r"^hermes_pipeline_archive_records_total (\S+)$", metrics, re.MULTILINE)
        assert found is not None
        return float(found.group(1))

    # counted from the sink's log: each record this run committed once (76 in all: 60 and the expired one on the
    # topic, 15 on the later one), whatever the kill, the topic change and the retention replayed or interrupted
    # reported between the job's retention passes, which take long on a loaded machine
    wait_until(lambda: archived() >= 76 - len(first_run), timeout=90, interval=0.5)
    assert archived() == 76 - len(first_run)
    metrics = httpx.get(f"{status}/prometheus", timeout=10).text
    assert "hermes_pipeline_archive_running 1.0" in metrics
    assert "hermes_pipeline_archived_topics 2.0" in metrics
    assert pipeline.stop() == 0, "SIGTERM stops the pipeline cleanly"


def test_retention_deletes_old_hours_keeps_recent_ones_and_infinite_topics_and_vacuum_removes_their_files(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    lake, checkpoints = Lake((tmp_path / "lake").as_uri()), tmp_path / "ckpt"  # a URI, as on a cluster
    assert read_lake(spark, lake).count() == 0 and lake_version(spark, lake) is None  # nothing archived yet
    kept_for_a_week, forever = unique("g.retention"), unique("g.infinite")
    retention = {kept_for_a_week: timedelta(days=7), forever: None}
    old = produce_at(kafka, kept_for_a_week, [now - timedelta(days=10), now - timedelta(days=8, hours=2)])
    recent = produce_at(kafka, kept_for_a_week, [now - timedelta(days=6), now])
    ancient = produce_at(kafka, forever, [now - timedelta(days=400), now])
    archive(spark, kafka, lake, checkpoints, [kept_for_a_week, forever], 6)
    before = lake_version(spark, lake)
    old_hours = [hour_of(now - timedelta(days=10)), hour_of(now - timedelta(days=8, hours=2))]
    old_files = [f for h in old_hours for f in (tmp_path / "lake").glob(f"topic={kept_for_a_week}/hour={h}/*.parquet")]
    assert len(old_files) == 2

    assert delete_expired(spark, lake, retention, datetime.now(UTC)) == 2

    remaining = {r.message_id for r in read_lake(spark, lake).collect()}
    assert remaining.isdisjoint(old)
    assert remaining == set(recent) | set(ancient)
    assert {r.message_id for r in read_lake(spark, lake, version=before).collect()} >= set(old), "time travel"
    assert all(f.exists() for f in old_files), "kept for readers of older versions until VACUUM"
    vacuum(spark, lake, timedelta(0))
    assert not any(f.exists() for f in old_files)
    assert {r.message_id for r in read_lake(spark, lake).collect()} == remaining

    newest = produce_at(kafka, kept_for_a_week, [now])  # the archive goes on appending
    archive(spark, kafka, lake, checkpoints, [kept_for_a_week, forever], 5)
    assert set(newest) <= {r.message_id for r in read_lake(spark, lake).collect()}
    assert delete_expired(spark, lake, retention, datetime.now(UTC)) == 0


def test_optimize_compacts_an_hours_files_and_keeps_each_message_once(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake, checkpoints = Lake(str(tmp_path / "lake")), tmp_path / "ckpt"
    topic, hour = unique("g.compaction"), datetime.now(UTC) - timedelta(hours=3)
    ids = produce_at(kafka, topic, [hour, hour], partition=0)
    archive(spark, kafka, lake, checkpoints, [topic], 2)
    ids += produce_at(kafka, topic, [hour, hour], partition=1)  # a second micro-batch: a second file
    archive(spark, kafka, lake, checkpoints, [topic], 4)
    hour_dir = tmp_path / "lake" / f"topic={topic}" / f"hour={hour_of(hour)}"
    written = sorted(hour_dir.glob("*.parquet"))
    assert len(written) >= 2
    before = lake_version(spark, lake)

    removed, added = optimize(spark, lake)

    assert (removed, added) == (len(written), 1)
    assert sorted(r.message_id for r in read_lake(spark, lake, topic).collect()) == sorted(ids), "each once"
    assert sorted(r.message_id for r in read_lake(spark, lake, topic, before).collect()) == sorted(ids)
    from deltalake import DeltaTable

    assert len(DeltaTable(str(tmp_path / "lake")).file_uris()) == 1
    assert optimize(spark, lake) == (0, 0), "nothing left to compact"
    monkeypatch.chdir(tmp_path)  # a relative root, as a reader in the checkout writes .hermes/pipeline/lake
    assert lake_version(spark, "lake") == lake_version(spark, lake) > before
    assert read_lake(spark, "lake", topic).count() == len(ids)


def test_a_parquet_lake_of_the_earlier_layout_is_converted_and_archived_on_exactly_once(
    spark: Any, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    topic, now = unique("g.migrated"), datetime.now(UTC)
    root = tmp_path / "lake"
    lake = Lake(str(root))
    context = archive_context(spark, kafka, lake, tmp_path / "ckpt")
    ids = produce_at(kafka, topic, [now - timedelta(days=2), now, now])
    # the earlier version's archive: Spark's Parquet file sink on the same checkpoint
    (
        lake_rows(context, [topic])
        .writeStream.format("parquet")
        .option("path", str(root))
        .option("checkpointLocation", archive_checkpoint(context))
        .partitionBy(*PARTITION_COLUMNS)
        .trigger(availableNow=True)
        .start()
        .awaitTermination(120)
    )
    committed = next(root.glob(f"topic={topic}/hour={hour_of(now)}/*.parquet"))
    (committed.parent / "part-99999-left-by-a-crashed-batch.parquet").write_bytes(committed.read_bytes())

    assert convert_parquet_lake(spark, lake)

    assert sorted(r.message_id for r in read_lake(spark, lake).collect()) == sorted(ids), "the sink's files only"
    assert not convert_parquet_lake(spark, lake), "converted once"
    ids += produce_at(kafka, topic, [now])
    query = start_archive(context, [topic], {"availableNow": True})
    query.awaitTermination(120)
    archived = [r.message_id for r in read_lake(spark, lake).collect()]
    assert sorted(archived) == sorted(ids), "on from the checkpoint: no gap, no duplicate"

"""Pure logic of the pipeline: read-limit sharing, the child's settings environment, lake hours."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hermes.config import load_settings
from hermes.pipeline.lake import hour_expired, hour_of
from hermes.pipeline.runner import settings_environment

pytestmark = pytest.mark.unit


def test_a_read_limit_is_shared_fairly_and_never_exceeds_what_is_there() -> None:
    share = pytest.importorskip("hermes.pipeline.kafka_source")._share
    available = {("t", "0"): 100, ("t", "1"): 2, ("t", "2"): 0, ("u", "0"): 50}

    granted = share(available, 30)

    assert sum(granted.values()) == 30
    assert granted[("t", "1")] == 2 and granted[("t", "2")] == 0
    assert granted[("t", "0")] == granted[("u", "0")] == 14
    assert share(available, 1000) == available
    assert all(granted[k] <= available[k] for k in available)


def test_the_pipeline_child_gets_the_same_settings_through_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(
        {"data_dir": tmp_path, "kafka_sasl_password": "s3cret", "pipeline_max_records_per_batch": 50, "pipeline": True}
    )

    env = settings_environment(settings, "broker:9092")
    for name in [k for k in os.environ if k.startswith("HERMES_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    again = load_settings({})

    assert again.kafka_bootstrap_servers == "broker:9092"
    assert again.kafka_sasl_password is not None and again.kafka_sasl_password.get_secret_value() == "s3cret"
    assert again.model_dump(exclude={"kafka_bootstrap_servers"}) == settings.model_dump(
        exclude={"kafka_bootstrap_servers"}
    )
    assert "HERMES_SPARK_REMOTE" not in env  # unset stays unset


def test_an_hour_expires_once_its_last_message_is_older_than_the_retention() -> None:
    now = datetime(2026, 11, 23, 12, 30, tzinfo=UTC)
    week = timedelta(days=7)
    assert hour_of(now) == "2026-11-23-12"
    assert hour_expired(hour_of(now - week - timedelta(hours=2)), week, now)
    assert not hour_expired(hour_of(now - week), week, now)  # 05:xx of that hour is not yet a week old
    assert not hour_expired(hour_of(now), week, now)


class PlannedReader:
    """The source's offset planning over given watermarks (the Kafka calls are covered by tests/spark/)."""

    def __init__(self, watermarks: dict[str, dict[str, tuple[int, int]]]) -> None:
        source = pytest.importorskip("hermes.pipeline.kafka_source")
        self.reader = source.KafkaStreamReader(source.KafkaOptions.parse({"bootstrap.servers": "x:1", "topics": "t"}))
        self.reader._watermarks = lambda: watermarks

    def plan(self, start: dict[str, dict[str, int]], max_rows: int | None = None) -> tuple[object, list[object]]:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        end = self.reader.latestOffset(start, ReadMaxRows(max_rows) if max_rows else ReadAllAvailable())
        return end, [(p.topic, p.partition, p.start, p.end) for p in self.reader.partitions(start, end)]


def test_a_new_partition_joins_at_its_earliest_offset_and_is_read_from_the_next_batch() -> None:
    planned = PlannedReader({"t": {"0": (0, 5), "1": (2, 7)}})

    end, reads = planned.plan({"t": {"0": 3}})
    assert end == {"t": {"0": 5, "1": 2}}
    assert reads == [("t", 0, 3, 5)]

    assert planned.plan({"t": {"0": 5, "1": 2}}) == ({"t": {"0": 5, "1": 7}}, [("t", 1, 2, 7)])


def test_a_batch_never_exceeds_its_row_limit_and_keeps_positions_of_topics_no_longer_read() -> None:
    planned = PlannedReader({"t": {"0": (0, 100), "1": (0, 100)}})

    end, reads = planned.plan({"t": {"0": 0, "1": 90}, "gone": {"0": 4}}, max_rows=20)

    assert end == {"gone": {"0": 4}, "t": {"0": 10, "1": 100}}
    assert sum(e - s for _, _, s, e in reads) == 20


def test_a_position_past_the_end_waits_and_then_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    source = pytest.importorskip("hermes.pipeline.kafka_source")
    planned = PlannedReader({"t": {"0": (0, 10)}})

    assert planned.plan({"t": {"0": 50}}) == ({"t": {"0": 50}}, [])  # a lagging leader: wait, read nothing
    monkeypatch.setattr(source, "_STARTED_OVER_AFTER", 0.0)
    assert planned.plan({"t": {"0": 50}}) == ({"t": {"0": 0}}, [])  # the topic was created again
    assert planned.plan({"t": {"0": 0}}) == ({"t": {"0": 10}}, [("t", 0, 0, 10)])


def test_without_a_jvm_gateway_only_local_lakes_are_pruned() -> None:
    from hermes.pipeline.retention import LocalFiles, lake_files

    class ConnectSession:  # Spark Connect: no SparkContext in the client process
        @property
        def sparkContext(self) -> object:
            raise NotImplementedError("sparkContext is not supported in Spark Connect")

    assert isinstance(lake_files(ConnectSession(), "/srv/lake"), LocalFiles)
    assert isinstance(lake_files(ConnectSession(), "file:///srv/lake"), LocalFiles)
    assert lake_files(ConnectSession(), "hdfs://nn/lake") is None

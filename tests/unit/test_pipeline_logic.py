"""Pure logic of the pipeline: the child's settings environment, lake hours, the Kafka connector's options and the
archive's kept positions."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hermes.broker.connection import KafkaConnection
from hermes.config import load_settings
from hermes.domain.names import TopicName
from hermes.domain.topic import Topic
from hermes.errors import StartupError
from hermes.pipeline.archive_positions import Kept, keep_dropped, planned_positions
from hermes.pipeline.connector import client_options, topics_pattern
from hermes.pipeline.files import LocalFiles, reachable_files
from hermes.pipeline.lake import expired_before, hour_of
from hermes.pipeline.runner import settings_environment

pytestmark = pytest.mark.unit


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
    cutoff = expired_before(week, now)  # retention deletes the hours before it
    assert hour_of(now - week - timedelta(hours=1)) < cutoff
    assert not hour_of(now - week) < cutoff  # 12:xx of that hour is not yet a week old
    assert not hour_of(now) < cutoff


def test_without_a_jvm_gateway_only_local_checkpoints_are_reached() -> None:
    class ConnectSession:  # Spark Connect: no SparkContext in the client process
        @property
        def sparkContext(self) -> object:
            raise NotImplementedError("sparkContext is not supported in Spark Connect")

    assert isinstance(reachable_files(ConnectSession(), "/srv/lake"), LocalFiles)
    assert isinstance(reachable_files(ConnectSession(), "file:///srv/lake"), LocalFiles)
    assert reachable_files(ConnectSession(), "hdfs://nn/lake") is None


def test_the_connector_gets_hermes_security_settings_in_the_java_clients_terms(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "data_dir": tmp_path,
            "kafka_security_protocol": "SASL_SSL",
            "kafka_sasl_mechanism": "SCRAM-SHA-512",
            "kafka_sasl_username": "hermes",
            "kafka_sasl_password": 's3"cr\\et',
            "kafka_ssl_ca_location": "/etc/ca.pem",
        }
    )

    options = client_options(KafkaConnection.from_settings(settings, "broker:9093"))

    assert options == {
        "kafka.bootstrap.servers": "broker:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="hermes" password="s3\\"cr\\\\et";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem",
    }
    plain = client_options(KafkaConnection.from_settings(load_settings({"data_dir": tmp_path}), "broker:9092"))
    assert plain == {"kafka.bootstrap.servers": "broker:9092", "kafka.security.protocol": "PLAINTEXT"}
    gssapi = load_settings({"data_dir": tmp_path, "kafka_sasl_mechanism": "GSSAPI", "kafka_sasl_username": "u"})
    with pytest.raises(StartupError, match="PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, not GSSAPI"):
        client_options(KafkaConnection.from_settings(gssapi, "broker:9092"))


def test_the_topics_pattern_matches_exactly_the_topics() -> None:
    pattern = re.compile(topics_pattern(["pl.a-b_c", "pl.other"]))

    assert pattern.search("pl.a-b_c") and pattern.search("pl.other")
    assert not any(pattern.search(t) for t in ("plXa-b_c", "pl.a-b_cd", "x.pl.other", "pl.a"))


def topic(name: str, created_at: int) -> Topic:
    return Topic(TopicName.parse(name), created_at=created_at)


def test_positions_are_those_of_the_newest_planned_batch_and_say_whether_it_is_committed(tmp_path: Path) -> None:
    files, checkpoint = LocalFiles(), str(tmp_path)
    assert planned_positions(files, checkpoint) == ({}, True)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for batch, end in ((0, 4), (1, 9)):  # as Spark writes them: version, batch metadata, the source's offsets
        metadata = '{"batchWatermarkMs":0,"batchTimestampMs":1}'
        (tmp_path / "offsets" / str(batch)).write_text(f'v1\n{metadata}\n{{"g.t":{{"0":{end},"1":2}}}}')
    (tmp_path / "commits" / "0").write_text("v1\n{}")

    assert planned_positions(files, checkpoint) == ({"g.t": {0: 9, 1: 2}}, False)
    (tmp_path / "commits" / "1").write_text("v1\n{}")
    assert planned_positions(files, checkpoint)[1]


def test_kept_positions_are_of_dropped_topics_never_go_back_and_end_with_their_topic() -> None:
    topics = {"g.on": topic("g.on", 1), "g.off": topic("g.off", 2)}
    read = {"g.on": {0: 5}, "g.off": {0: 7, 1: 3}}

    kept = keep_dropped({}, read, ["g.on"], topics)
    assert kept == {"g.off": Kept(2, {0: 7, 1: 3})}
    # switched on, then off again before reading past its kept position (and a partition added meanwhile)
    assert keep_dropped(kept, {"g.off": {0: 2, 1: 4, 2: 1}}, ["g.on"], topics) == {"g.off": Kept(2, {0: 7, 1: 4, 2: 1})}
    assert keep_dropped(kept, read, ["g.on", "g.off"], topics) == kept  # listed again: kept as it is
    assert keep_dropped(kept, {}, ["g.on"], {"g.on": topics["g.on"], "g.off": topic("g.off", 3)}) == {}
    assert keep_dropped(kept, {}, ["g.on"], {"g.on": topics["g.on"]}) == {}


def test_the_archive_counts_the_rows_of_archive_commits_made_since_it_started(tmp_path: Path) -> None:
    from hermes.pipeline.archive_commits import BatchMark
    from hermes.pipeline.archive_counting import LogCount
    from hermes.pipeline.prometheus import ARCHIVE_BATCHES, ARCHIVE_RECORDS

    log_dir = tmp_path / "_delta_log"
    log_dir.mkdir()

    def commit(version: int, operation: str, rows: int, batch: int | None = None) -> None:
        info: dict[str, Any] = {"operation": operation, "operationMetrics": {"numOutputRows": str(rows)}}
        if batch is not None:
            info["userMetadata"] = BatchMark("q", batch).user_metadata()
        add = {"add": {"path": f"part-{version}.parquet"}}
        (log_dir / f"{version:020d}.json").write_text(f"{json.dumps({'commitInfo': info})}\n{json.dumps(add)}\n")

    commit(0, "WRITE", 7, batch=0)  # an earlier run's
    count = LogCount(tmp_path)
    records, batches = ARCHIVE_RECORDS._value.get(), ARCHIVE_BATCHES._value.get()
    commit(1, "WRITE", 5, batch=1)
    commit(2, "OPTIMIZE", 12)  # rewrites rows committed before: not new ones
    commit(3, "DELETE", 0)
    commit(4, "WRITE", 9)  # someone else's append
    commit(5, "WRITE", 3, batch=2)
    (log_dir / "00000000000000000005.crc").write_text("{}")  # Delta's checksum files are not commits

    count.update(None)
    count.update(None)  # nothing new

    assert (ARCHIVE_RECORDS._value.get() - records, ARCHIVE_BATCHES._value.get() - batches) == (8, 2)


class History:
    """``DESCRIBE HISTORY`` of a Delta table, newest commit first (a stand-in for Spark's SQL)."""

    def __init__(self, commits: list[dict[str, Any]]) -> None:
        self.commits, self.limits = commits, []

    def sql(self, statement: str) -> Any:
        limit = int(statement.rsplit("LIMIT", 1)[1])
        self.limits.append(limit)
        return SimpleNamespace(collect=lambda: [SimpleNamespace(asDict=c.copy) for c in self.commits[:limit]])


def history_commit(operation: str, user_metadata: str | None = None, **parameters: str) -> dict[str, Any]:
    return {"operation": operation, "userMetadata": user_metadata, "operationParameters": parameters}


def test_a_replayed_batch_is_looked_up_in_the_newest_archive_commit_however_far_back() -> None:
    from hermes.pipeline.archive_commits import BatchMark, last_committed_batch
    from hermes.pipeline.lake import Lake

    lake = Lake("s3a://bucket/lake")  # read with Spark's DESCRIBE HISTORY (a local lake's with deltalake)
    upkeep = [history_commit(op) for op in ["OPTIMIZE", "DELETE", "VACUUM END", "VACUUM START"] * 30]
    archived = history_commit("WRITE", BatchMark("q1", 41).user_metadata())
    history = History([*upkeep, archived, history_commit("WRITE", BatchMark("q1", 40).user_metadata())])
    assert last_committed_batch(history, lake, "q1") == 41
    assert history.limits == [50, 400]  # read further back only while no archive commit was found
    assert last_committed_batch(history, lake, "q2") == -1  # a new checkpoint: q1's batches are not its own
    # someone else's metadata, then a commit of Delta's streaming sink (the archive's before this version)
    sink = history_commit("STREAMING UPDATE", queryId="q0", epochId="7", outputMode="Append")
    assert last_committed_batch(History([history_commit("WRITE", '{"writer": "etl"}'), sink]), lake, "q0") == 7
    assert last_committed_batch(History([history_commit("WRITE", "not json")] * 3), lake, "q0") == -1


def test_a_tables_newest_version_is_found_from_its_last_checkpoint_without_listing_the_log(tmp_path: Path) -> None:
    from hermes.pipeline.lake import DELTA_LOG, newest_version

    log_dir = tmp_path / DELTA_LOG
    log_dir.mkdir()
    assert newest_version(tmp_path) == -1
    for version in range(3):
        (log_dir / f"{version:020d}.json").write_text("{}\n")
    assert newest_version(tmp_path) == 2
    # a month on: Delta removed the commits before its retention, and checkpointed at 20
    for version in range(3):
        (log_dir / f"{version:020d}.json").unlink()
    for version in range(15, 24):
        (log_dir / f"{version:020d}.json").write_text("{}\n")
    (log_dir / "_last_checkpoint").write_text('{"version": 20, "size": 9}')
    assert newest_version(tmp_path) == 23
    assert newest_version(tmp_path, known=22) == 23

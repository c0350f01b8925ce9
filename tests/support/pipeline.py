"""Running the pipeline in tests: its jobs in the test process, on the shared SparkSession, beside an
in-process Hermes, or ``hermes pipeline`` as a child process; the archive query alone on a bare broker."""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlparse

import pytest
from confluent_kafka import Producer

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.config import load_settings
from hermes.domain.message import KAFKA_MESSAGE_ID, KAFKA_PUBLISH_TIMESTAMP
from hermes.pipeline.lake import Lake
from hermes.pipeline.offline_storage import start_archive
from hermes.pipeline.runner import PipelineContext
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, HermesProcess, InProcessHermes, alive, children

RETRANSMISSION_TASKS = "/offline-retransmission/tasks"


def pipeline_context(
    spark: Any,
    hermes: InProcessHermes,
    tmp_path_factory: pytest.TempPathFactory,
    checkpoints: str | None = None,
    **settings: Any,
) -> PipelineContext:
    """What the ``hermes pipeline`` process would give its jobs: Hermes' settings (with ``settings`` changed),
    broker connection and metadata repository, a fresh lake and fresh checkpoints (unless ``checkpoints``)."""
    running = hermes.hermes
    assert running.connection is not None and running.repository is not None
    return PipelineContext(
        settings=running.settings.model_copy(update=settings),
        spark=spark,
        connection=running.connection,
        repository=running.repository,
        lake=Lake(str(tmp_path_factory.mktemp("lake"))),
        checkpoints=checkpoints or str(tmp_path_factory.mktemp("checkpoints")),
        trigger_interval=1.0,
        max_records_per_batch=None,
        retention_interval=3600.0,
    )


def local(root: str) -> Path:
    return Path(urlparse(root).path)


def lake_ids(lake: Lake, topic: str | None = None) -> list[str]:
    """The ids of the messages in the lake's newest version (of one topic), read without Spark (the
    ``deltalake`` package): cheap enough to poll while Spark runs elsewhere."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(local(lake.root)))
    except TableNotFoundError:
        return []
    filters = None if topic is None else [("topic", "=", topic)]
    ids: list[str] = table.to_pyarrow_table(columns=["message_id"], filters=filters).column(0).to_pylist()
    return ids


def archived_rows(lake: Lake, topic: str) -> list[SimpleNamespace]:
    """One topic's rows of the lake's newest version, read without Spark (``deltalake``): each column an
    attribute, as on a row Spark collects (``headers`` a dict)."""
    from deltalake import DeltaTable

    table = DeltaTable(str(local(lake.root))).to_pyarrow_table(filters=[("topic", "=", topic)])
    return [SimpleNamespace(**{**row, "headers": dict(row["headers"] or [])}) for row in table.to_pylist()]


def lake_count(spark: Any, lake: Lake, topic: str | None = None) -> int:
    """Committed messages in the lake (of one topic), read without Spark."""
    return len(lake_ids(lake, topic))


def produce_at(kafka: EmbeddedBroker, topic: str, moments: list[datetime], partition: int | None = None) -> list[str]:
    """Produces one message per moment in the frontend's format, published at that moment (to ``partition``, or
    as the producer chooses); creates the topic with 2 partitions if it does not exist. Returns the ids."""
    admin = BrokerAdmin(KafkaConnection(kafka.bootstrap_servers))
    if not admin.topic_exists(topic):
        admin.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    ids = []
    for moment in moments:
        ids.append(str(uuid.uuid4()))
        headers = [(KAFKA_MESSAGE_ID, ids[-1]), (KAFKA_PUBLISH_TIMESTAMP, str(int(moment.timestamp() * 1000)))]
        producer.produce(topic, value=b"{}", headers=headers, **({} if partition is None else {"partition": partition}))
    assert producer.flush(30) == 0
    return ids


def archive_context(
    spark: Any, kafka: EmbeddedBroker, lake: Lake, checkpoints: Path, max_records_per_batch: int | None = None
) -> PipelineContext:
    """What the archive query needs, on a bare broker (no Hermes: the query itself reads no metadata)."""
    return PipelineContext(
        settings=load_settings({}),
        spark=spark,
        connection=KafkaConnection(kafka.bootstrap_servers),
        repository=None,  # type: ignore[arg-type]
        lake=lake,
        checkpoints=str(checkpoints),
        trigger_interval=0.2,
        max_records_per_batch=max_records_per_batch,
        retention_interval=3600,
    )


def archive(spark: Any, kafka: EmbeddedBroker, lake: Lake, checkpoints: Path, topics: list[str], total: int) -> None:
    """Runs the archive query until the lake holds ``total`` messages."""
    query = start_archive(archive_context(spark, kafka, lake, checkpoints), topics)
    try:
        wait_until(lambda: lake_count(spark, lake) >= total, timeout=120, interval=0.3)
    finally:
        query.stop()


@contextlib.contextmanager
def pipeline_beside(
    hermes: InProcessHermes, kafka: EmbeddedBroker, tmp_path: Path, *extra: str
) -> Iterator[PipelineCommand]:
    """A ``PipelineCommand`` on the test's Hermes and broker, its lake and checkpoints under ``tmp_path``
    (``tmp_path / "lake"``, ``tmp_path / "ckpt"``), stopped at the end."""
    running = PipelineCommand(
        hermes.hermes.settings.data_dir, kafka.bootstrap_servers, tmp_path / "lake", tmp_path / "ckpt", *extra
    )
    try:
        yield running
    finally:
        running.stop()


class PipelineCommand:
    """``hermes pipeline`` as a real child process on a Hermes data directory and broker: the archive job
    alone on ``local[2]``, small batches, unless ``extra`` arguments say otherwise (the last flag wins). The
    lake's retention passes keep their hourly default (one pass after the first commit): a test of retention
    asks for a short interval, the others leave the Spark cores to the jobs they check."""

    def __init__(self, data_dir: Path, bootstrap: str, lake: Path, checkpoints: Path, *extra: str) -> None:
        self.args = (
            "--kafka-bootstrap-servers", bootstrap,
            "--pipeline-lake", str(lake),
            "--pipeline-checkpoints", str(checkpoints),
            "--pipeline-trigger-interval", "0.5",
            "--pipeline-max-records-per-batch", "15",
            "--pipeline-jobs", "archive",
            "--spark-master", "local[2]",
            "--metadata-poll-interval", "0.1",
            *extra,
        )  # fmt: skip
        self.data_dir = data_dir
        self.process: HermesProcess | None = None

    def start(self) -> None:
        """In a process group of its own, with the Spark JVM it starts: ``stop`` ends both, whatever the test."""
        process = HermesProcess(self.data_dir, *self.args, command="pipeline")
        self.process = process.start(wait_for="nothing", own_group=True)

    def kill(self) -> None:
        """SIGKILL, and wait until its Spark JVM is gone too (so nothing it started commits afterwards)."""
        assert self.process is not None and self.process.process is not None
        spark = children(self.process.process.pid)
        self.process.stop(signal.SIGKILL)
        wait_until(lambda: not any(alive(pid) for pid in spark), timeout=30)

    def stop(self) -> int | None:
        """Its exit code after SIGTERM (None when it had exited); its group is killed in any case, so that a
        pipeline that does not stop in time, or its JVM, outlives no test (it would hold the next one's Kafka
        group and ports)."""
        if self.process is None or self.process.process is None:
            return None
        try:
            return self.process.stop(signal.SIGTERM, timeout=60) if self.process.process.poll() is None else None
        finally:
            self.process.kill()


def retransmit_offline(
    client: HermesClient, source: str, target: str, start: datetime | str, end: datetime | str, timeout: float = 120
) -> dict[str, Any]:
    """Creates an offline retransmission task through the management API, waits until it is DONE and returns
    its listing (status and progress)."""
    span = [t if isinstance(t, str) else t.astimezone(UTC).isoformat() for t in (start, end)]
    body = {"sourceTopic": source, "targetTopic": target, "startTimestamp": span[0], "endTimestamp": span[1]}
    created = client.management.post(RETRANSMISSION_TASKS, json=body)
    assert created.status_code == 201, created.text
    task_id = created.json()["taskId"]

    def task() -> dict[str, Any]:
        listed: list[dict[str, Any]] = client.management.get(RETRANSMISSION_TASKS).json()
        return next(t for t in listed if t["taskId"] == task_id)

    def done() -> bool:
        current = task()
        assert current["status"] != "FAILED", current  # no point waiting out the timeout: show the reason
        return bool(current["status"] == "DONE")

    try:
        wait_until(done, timeout, 0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the task: {task()}") from None
    return task()

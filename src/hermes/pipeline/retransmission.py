"""Offline retransmission: tasks created through management (``/offline-retransmission/tasks``) are run here
as Spark batch jobs that read a time range of a topic from the lake and republish it to a target topic.

Messages go to the broker in the frontend's Kafka format, so the target topic's subscriptions deliver them
like any other message: the body, key and Avro schema version as archived, the publisher's propagated
headers, and the *original* ``hermes-message-id`` and ``hermes-publish-ts`` headers, so subscribers receive
the original ``Hermes-Message-Id``. The task id rides along in ``hermes-offline-retransmission-task``.

The range is ``startTimestamp <= publish time < endTimestamp``, read from the lake table's version that was
newest when the task started (Delta's time travel: compaction and retention committing meanwhile change
nothing the task reads), one lake hour at a time; progress is updated after each hour, and a task deleted
meanwhile stops before the next hour. Messages of one key keep their order. At least once: a pipeline that
stops mid-task finds the task RUNNING when it starts again and runs it again from the start, so messages
republished before the stop come twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from hermes.broker.connection import KafkaConnection
from hermes.broker.producer import BrokerProducer
from hermes.domain.message import KAFKA_CLOUD_EVENT_PREFIX, KAFKA_CONTENT_TYPE, PLACEHOLDER_FORMAT, kafka_headers
from hermes.domain.retransmission_task import RetransmissionTask, TaskStatus
from hermes.domain.topic import Ack
from hermes.errors import MetadataUnreachable
from hermes.metadata.documents import OFFLINE_RETRANSMISSION_TASKS
from hermes.metadata.repository import ChangeKind, MetadataChange, MetadataRepository
from hermes.pipeline.job import LoopingJob
from hermes.pipeline.lake import Lake, hour_of, lake_version, read_lake

log = logging.getLogger(__name__)

KAFKA_RETRANSMISSION_TASK = "hermes-offline-retransmission-task"
_IN_FLIGHT = 1000  # messages a partition's producer may have unacknowledged
_SPARK_TAG = "hermes-offline-retransmission"  # lets stop() interrupt a running task's Spark jobs
_UNREACHABLE_RETRY = 0.5  # seconds between two tries to store a task's state while the store is unreachable


Reporter = Callable[[int, int], None]


class TaskDeleted(Exception):
    """The task was deleted while it ran."""


def run_task(spark: Any, lake: Lake, connection: KafkaConnection, task: RetransmissionTask, report: Reporter) -> int:
    """Republishes the task's range; returns how many messages were sent. ``report`` is told the progress
    (and raises ``TaskDeleted`` to stop)."""
    from pyspark.sql import functions as f

    source = task.source_topic.qualified
    published = f.unix_millis(f.col("publish_timestamp"))
    version = lake_version(spark, lake)
    log.info("offline retransmission %s: reading version %s of the lake", task.task_id, version)
    frame = (
        read_lake(spark, lake, source, version)
        .where(
            (f.col("hour") >= hour_of(task.start))
            & (f.col("hour") <= hour_of(task.end))
            & (published >= task.start_ms)
            & (published < task.end_ms)
        )
        .select(
            "hour",
            "message_id",
            published.alias("published"),
            "partition",
            "offset",
            "key",
            "schema_version",
            "headers",
            "body",
        )
    )
    per_hour = {row["hour"]: row["count"] for row in frame.groupBy("hour").count().collect()}
    total = sum(per_hour.values())
    report(0, total)
    sent = 0
    send = republisher(connection, task.target_topic.qualified, task.task_id)
    for hour in sorted(per_hour):
        rows = frame.where(f.col("hour") == hour)
        # per key in publish order; messages without a key may go to any partition anyway
        rows.repartition("key").sortWithinPartitions("published", "partition", "offset").foreachPartition(send)
        sent += per_hour[hour]
        report(sent, total)
    return sent


def republisher(connection: KafkaConnection, target: str, task_id: str) -> Callable[[Iterable[Any]], None]:
    """The function each Spark partition runs: produce its rows, and fail unless the broker took them all."""

    def send_partition(rows: Iterable[Any]) -> None:
        asyncio.run(_send(connection, target, task_id, rows))

    return send_partition


async def _send(connection: KafkaConnection, target: str, task_id: str, rows: Iterable[Any]) -> None:
    producer = BrokerProducer(connection)
    try:
        pending: list[asyncio.Future[Any]] = []
        for row in rows:
            pending.append(
                producer.send(target, row["body"], key=row["key"], headers=frontend_headers(row, task_id), ack=Ack.ALL)
            )
            if len(pending) >= _IN_FLIGHT:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await asyncio.to_thread(producer.close, 10.0)


def frontend_headers(row: Any, task_id: str) -> list[tuple[str, bytes]]:
    """The Kafka headers the frontend would have written, with the archived (original) values; an offloaded
    message's placeholder gets its marker back, so consumers fetch the stored body again, and a CloudEvent its
    attributes."""
    propagated = dict(row["headers"] or {})
    name, value = PLACEHOLDER_FORMAT
    placeholder = propagated.pop(name, None) == value.decode()
    cloud_event = [
        (key, propagated.pop(key).encode())
        for key in list(propagated)
        if key.startswith(KAFKA_CLOUD_EVENT_PREFIX) or key == KAFKA_CONTENT_TYPE
    ]
    headers = kafka_headers(row["message_id"], row["published"], row["schema_version"], propagated)
    headers.extend(cloud_event)
    if placeholder:
        headers.append(PLACEHOLDER_FORMAT)
    headers.append((KAFKA_RETRANSMISSION_TASK, task_id.encode()))
    return headers


class RetransmissionJob(LoopingJob):
    """Runs the stored tasks one at a time, oldest first: PENDING ones, and RUNNING ones a stopped pipeline
    left unfinished (run again: at least once)."""

    name = "offline-retransmission"
    watches_metadata = True

    def wakes_on(self, change: MetadataChange) -> bool:
        return change.kind is ChangeKind.DOCUMENT and change.key.startswith(OFFLINE_RETRANSMISSION_TASKS + "/")

    def interrupt(self) -> None:
        try:  # a task's Spark jobs carry the tag (classic sessions and Spark Connect alike)
            self._context.spark.interruptTag(_SPARK_TAG)
        except Exception:
            log.warning("offline retransmission: interrupting the running task failed", exc_info=True)

    def step(self) -> float:
        try:
            task = next_task(self._context.repository)
            if task is not None:
                self._context.spark.addTag(_SPARK_TAG)  # tags belong to the thread that starts the jobs
                self._execute(task)
                return 0.0
        except Exception:
            log.exception("offline retransmission: looking for tasks failed")
        return self._context.settings.pipeline_retransmission_poll

    def _execute(self, task: RetransmissionTask) -> None:
        repository = self._context.repository
        log.info(
            "offline retransmission %s: %s -> %s, %s to %s",
            task.task_id,
            task.source_topic,
            task.target_topic,
            task.start,
            task.end,
        )
        self._update(task.with_progress(TaskStatus.RUNNING, 0, None))

        def report(sent: int, total: int) -> None:
            if self._stopping.is_set() or not self._update(task.with_progress(TaskStatus.RUNNING, sent, total)):
                raise TaskDeleted

        try:
            sent = run_task(self._context.spark, self._context.lake, self._context.connection, task, report)
        except TaskDeleted:
            log.info("offline retransmission %s: deleted or stopped while running", task.task_id)
            return
        except Exception as exc:
            if self._stopping.is_set():
                return  # left RUNNING: run again after the restart
            log.exception("offline retransmission %s failed", task.task_id)
            current = repository.get_document(OFFLINE_RETRANSMISSION_TASKS, task.task_id)
            progress = (current or {}).get("progress") or {}
            self._update(
                task.with_progress(
                    TaskStatus.FAILED, int(progress.get("republished", 0)), progress.get("total"), _reason(exc)
                )
            )
            return
        self._update(task.with_progress(TaskStatus.DONE, sent, sent))
        log.info("offline retransmission %s: done, %d messages", task.task_id, sent)

    def _update(self, task: RetransmissionTask) -> bool:
        """``update``, waiting while the store (ZooKeeper) is unreachable rather than failing the task, which would
        then run again from its start; a stopping job waits no more (the task runs again after the restart)."""
        while True:
            try:
                return update(self._context.repository, task)
            except MetadataUnreachable:
                if self._stopping.wait(_UNREACHABLE_RETRY):
                    raise


def next_task(repository: MetadataRepository) -> RetransmissionTask | None:
    waiting = [
        RetransmissionTask.from_document(d)
        for d in repository.list_documents(OFFLINE_RETRANSMISSION_TASKS).values()
        if d.get("status") in (TaskStatus.PENDING.value, TaskStatus.RUNNING.value)
    ]
    return min(waiting, key=lambda t: (t.created_at, t.task_id), default=None)


def update(repository: MetadataRepository, task: RetransmissionTask) -> bool:
    """Stores the task's new state unless it was deleted meanwhile; False when it was."""
    if repository.get_document(OFFLINE_RETRANSMISSION_TASKS, task.task_id) is None:
        return False
    repository.put_document(OFFLINE_RETRANSMISSION_TASKS, task.task_id, task.to_document())
    return True


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]

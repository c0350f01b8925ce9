"""Tracking analytics: one streaming read of the tracking topic materialized two ways.

- the trace table: every trace event, Parquet partitioned by topic and date, through Spark's file sink
  (exactly once: the sink's metadata log lists the committed files; readers use only those);
- per-subscription, per-minute delivery statistics: delivered, discarded, failed attempts and delivery
  latencies (publish to successful delivery, from the consumer events' ``publishTimestamp``). Each micro-batch
  writes its partial counts to its own directory, so a replayed batch overwrites, never adds; readers sum.

Compaction: a micro-batch every second leaves a small file per batch and topic, and a lookup must open
every file of the topic. Every ``pipeline_tracking_compaction_interval`` seconds the job rewrites each topic's
not yet compacted files into one block sorted by message id (see :mod:`hermes.pipeline.traces` for the
layout and how readers combine blocks with the sink's files). Before each compaction the retention
(``pipeline_trace_retention``, :mod:`hermes.pipeline.trace_retention`) removes expired events and the sink
files earlier blocks replaced.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes.domain.trace import TRACKING_TOPIC
from hermes.pipeline.connector import KAFKA_FORMAT, topics_pattern
from hermes.pipeline.job import LoopingJob
from hermes.pipeline.offline_storage import source_options
from hermes.pipeline.trace_retention import apply_trace_retention
from hermes.pipeline.traces import (
    COMPACTED,
    MANIFEST,
    STATISTICS,
    TRACES,
    committed_files,
    compacted_blocks,
    tracking_root,
)

if TYPE_CHECKING:
    from hermes.pipeline.runner import PipelineContext

log = logging.getLogger(__name__)

_CHECK_INTERVAL = 5.0  # seconds between checks that both queries still run

EVENT_SCHEMA = (
    "messageId STRING, timestamp BIGINT, topicName STRING, status STRING, cluster STRING, subscription STRING, "
    "`partition` INT, `offset` BIGINT, reason STRING, publishTimestamp BIGINT"
)


def trace_events(spark: Any, source_options: dict[str, str]) -> Any:
    """The tracking topic as a stream of parsed events, each with its position on the topic."""
    from pyspark.sql import functions as f

    raw = (
        spark.readStream.format(KAFKA_FORMAT)
        .options(**source_options)
        .option("subscribePattern", topics_pattern([TRACKING_TOPIC]))
        .load()
    )
    parsed = raw.select(
        f.from_json(f.col("value").cast("string"), EVENT_SCHEMA).alias("e"),
        f.col("partition").alias("trackingPartition"),
        f.col("offset").alias("trackingOffset"),
    )
    return parsed.select("e.*", "trackingPartition", "trackingOffset").where(
        f.col("messageId").isNotNull() & f.col("topicName").isNotNull() & f.col("timestamp").isNotNull()
    )


def start_tracking(
    spark: Any,
    source_options: dict[str, str],
    root: Path,
    checkpoints: str,
    trace_trigger: str = "1 second",
    statistics_trigger: str = "5 seconds",
    retention: timedelta = timedelta(days=7),
) -> list[Any]:
    """Starts both queries; returns them (the caller stops them). The trace sink's log forgets files older than
    ``retention`` when it compacts itself (every 10 batches), so it stops growing once the files are gone."""
    from pyspark.sql import functions as f

    events = trace_events(spark, source_options)
    traces = (
        events.withColumn("topic", f.col("topicName"))
        .withColumn("date", f.date_format(f.timestamp_millis(f.col("timestamp")), "yyyy-MM-dd"))
        .writeStream.queryName("hermes-tracking-traces")
        .format("parquet")
        .option("path", str(root / TRACES))
        .option("checkpointLocation", f"{checkpoints.rstrip('/')}/traces")
        .option("retention", f"{int(retention.total_seconds() * 1000)}ms")
        .partitionBy("topic", "date")
        .trigger(processingTime=trace_trigger)
        .start()
    )
    statistics = (
        trace_events(spark, source_options)
        .writeStream.queryName("hermes-tracking-statistics")
        .option("checkpointLocation", f"{checkpoints.rstrip('/')}/statistics")
        .foreachBatch(lambda batch, batch_id: write_statistics(batch, batch_id, root / STATISTICS))
        .trigger(processingTime=statistics_trigger)
        .start()
    )
    return [traces, statistics]


def write_statistics(events: Any, batch_id: int, directory: Path) -> None:
    """Partial per-minute statistics of one micro-batch's consumer events, in ``batch=<id>``."""
    from pyspark.sql import functions as f

    consumer = events.where(f.col("subscription").isNotNull()).persist()
    try:
        if not consumer.isEmpty():  # an idle batch writes nothing (a directory per idle batch would pile up)
            _partials(consumer).coalesce(1).write.mode("overwrite").parquet(str(directory / f"batch={batch_id}"))
    finally:
        consumer.unpersist()


def _partials(consumer: Any) -> Any:
    from pyspark.sql import functions as f

    status = f.col("status")
    latency = f.when(
        (status == "SUCCESS") & f.col("publishTimestamp").isNotNull(),
        f.greatest(f.col("timestamp") - f.col("publishTimestamp"), f.lit(0)),
    )
    return consumer.groupBy(
        "topicName", "subscription", (f.floor(f.col("timestamp") / 60_000) * 60_000).cast("long").alias("minute")
    ).agg(
        f.count(f.when(status == "SUCCESS", 1)).alias("delivered"),
        f.count(f.when(status == "DISCARDED", 1)).alias("discarded"),
        f.count(f.when(status == "FAILED", 1)).alias("failedAttempts"),
        f.collect_list(latency).alias("latencies"),
    )


def compact_traces(spark: Any, root: Path) -> int:
    """Compacts every topic's sink files that no block replaces yet into one new block per topic; returns
    how many files were compacted. Only one compaction may run at a time (the tracking job's thread)."""
    for orphan in (root / COMPACTED).glob("topic=*/block=*"):
        if not (orphan / MANIFEST).is_file():
            shutil.rmtree(orphan, ignore_errors=True)  # a compaction that did not finish
    pending: dict[str, list[Path]] = defaultdict(list)
    for path in committed_files(root / TRACES):
        topic_dir = path.parent.parent.name
        if topic_dir.startswith("topic=") and path.exists():
            pending[topic_dir.removeprefix("topic=")].append(path)
    compacted = 0
    for topic, files in sorted(pending.items()):
        replaced = compacted_blocks(root, topic)[1]
        todo = sorted(str(p) for p in files if str(p) not in replaced)
        if len(todo) < 2:
            continue
        block = root / COMPACTED / f"topic={topic}" / f"block={time.time_ns()}"
        events = spark.read.parquet(*todo).dropDuplicates(["trackingPartition", "trackingOffset"])
        events.repartition(1).sortWithinPartitions("messageId").write.parquet(str(block))
        written = block / f".{MANIFEST}.tmp"
        written.write_text(json.dumps({"replaces": todo}))
        os.replace(written, block / MANIFEST)  # the block counts from here on
        compacted += len(todo)
    return compacted


def maintain_traces(spark: Any, root: Path, retention: timedelta) -> None:
    """The periodic pass over the tracking tables: retention first (it deletes the sink files that blocks of
    earlier passes replace), then compaction."""
    removed = apply_trace_retention(root, retention, datetime.now(UTC))
    if removed:
        log.info("tracking: retention removed %s", removed)
    log.info("tracking: compacted %d trace files", compact_traces(spark, root))


class TrackingJob(LoopingJob):
    """Keeps both tracking queries running (a failed one is started again from its checkpoint), and compacts
    the trace files periodically after applying their retention."""

    name = "tracking"

    def __init__(self, context: PipelineContext) -> None:
        super().__init__(context)
        self._queries: list[Any] = []
        self._next_compaction = time.monotonic() + context.settings.pipeline_tracking_compaction_interval

    def stopped(self) -> None:
        self._stop_queries()

    def step(self) -> float:
        try:
            failed = [q for q in self._queries if not q.isActive]
            if failed:
                log.error("tracking: a query stopped (%s); starting them again", failed[0].exception())
                self._stop_queries()
            if not self._queries:
                self._queries = self._start()
        except Exception:
            log.exception("tracking: starting the queries failed; trying again")
            self._stop_queries()
        if time.monotonic() >= self._next_compaction:
            self._next_compaction = time.monotonic() + self._context.settings.pipeline_tracking_compaction_interval
            retention = timedelta(seconds=self._context.settings.pipeline_trace_retention)
            try:
                maintain_traces(self._context.spark, tracking_root(self._context.settings), retention)
            except Exception:
                log.exception("tracking: retention or compaction failed; trying again at the next interval")
        return _CHECK_INTERVAL

    def _start(self) -> list[Any]:
        context, settings = self._context, self._context.settings
        root = tracking_root(settings)
        queries = start_tracking(
            context.spark,
            source_options(context, [TRACKING_TOPIC]),
            root,
            f"{context.checkpoints.rstrip('/')}/{self.name}",
            f"{settings.pipeline_tracking_trigger} seconds",
            f"{settings.pipeline_statistics_trigger} seconds",
            timedelta(seconds=settings.pipeline_trace_retention),
        )
        log.info("tracking: materializing %s into %s", TRACKING_TOPIC, root)
        return queries

    def _stop_queries(self) -> None:
        queries, self._queries = self._queries, []
        for query in queries:
            try:
                query.stop()
            except Exception:
                log.warning("tracking: stopping a query failed", exc_info=True)

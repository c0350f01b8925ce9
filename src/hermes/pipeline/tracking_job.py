"""Tracking analytics: one streaming read of the tracking topic materialized into two Delta Lake tables
(layout in :mod:`hermes.pipeline.traces`):

- the trace table: every trace event, partitioned by topic and date, through Delta's streaming sink (exactly
  once per micro-batch);
- per-subscription, per-minute delivery statistics: delivered, discarded, failed attempts and delivery
  latencies (publish to successful delivery, from the consumer events' ``publishTimestamp``). Each micro-batch
  appends its partial counts through ``foreachBatch`` as an idempotent Delta write (``txnAppId`` and the batch
  id as ``txnVersion``), so a replayed batch is skipped, never added twice; readers sum.

Upkeep, every ``pipeline_tracking_compaction_interval`` seconds, all Delta's own SQL beside the running
queries: retention (``DELETE`` of the days and minutes older than ``pipeline_trace_retention``, then
``VACUUM``), then ``OPTIMIZE`` (the trace table's recent days ``ZORDER BY (messageId)``, so a lookup's message
id falls in few files and row groups).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes.domain.trace import TRACKING_TOPIC
from hermes.pipeline.connector import KAFKA_FORMAT, topics_pattern
from hermes.pipeline.job import LoopingJob
from hermes.pipeline.lake import DELTA_LOG
from hermes.pipeline.lake_maintenance import sql_literal
from hermes.pipeline.offline_storage import source_options
from hermes.pipeline.traces import (
    STATISTICS,
    STATISTICS_QUERY,
    TRACE_QUERY,
    TRACES,
    TRACKING_JOB,
    tracking_root,
)
from hermes.pipeline.tracking_migration import migrate_tracking

if TYPE_CHECKING:
    from hermes.pipeline.runner import PipelineContext

log = logging.getLogger(__name__)

_CHECK_INTERVAL = 5.0  # seconds between checks that both queries still run
# The statistics writes' transaction id: one tracking job per tracking directory, batch ids from its checkpoint
STATISTICS_APP_ID = "hermes-tracking-statistics"

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
) -> list[Any]:
    """Starts both queries; returns them (the caller stops them)."""
    from pyspark.sql import functions as f

    events = trace_events(spark, source_options)
    traces = (
        events.withColumn("topic", f.col("topicName"))
        .withColumn("date", f.date_format(f.timestamp_millis(f.col("timestamp")), "yyyy-MM-dd"))
        .writeStream.queryName("hermes-tracking-traces")
        .format("delta")
        .option("checkpointLocation", f"{checkpoints.rstrip('/')}/{TRACE_QUERY}")
        .partitionBy("topic", "date")
        .trigger(processingTime=trace_trigger)
        .start(str(root / TRACES))
    )
    try:
        statistics = (
            trace_events(spark, source_options)
            .writeStream.queryName("hermes-tracking-statistics")
            .option("checkpointLocation", f"{checkpoints.rstrip('/')}/{STATISTICS_QUERY}")
            .foreachBatch(lambda batch, batch_id: write_statistics(batch, batch_id, root / STATISTICS))
            .trigger(processingTime=statistics_trigger)
            .start()
        )
    except BaseException:
        # left running, the traces query would keep its name taken: every later start would fail on it
        traces.stop()
        raise
    return [traces, statistics]


def write_statistics(events: Any, batch_id: int, table: Path) -> None:
    """Appends the per-minute statistics of one micro-batch's consumer events, once per batch id."""
    from pyspark.sql import functions as f

    consumer = events.where(f.col("subscription").isNotNull()).persist()
    try:
        if not consumer.isEmpty():  # an idle batch writes nothing (a commit per idle batch would pile up)
            (
                _partials(consumer)
                .coalesce(1)
                .write.format("delta")
                .mode("append")
                .option("txnAppId", STATISTICS_APP_ID)
                .option("txnVersion", batch_id)
                .save(str(table))
            )
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


def _table(path: Path) -> str | None:
    """The Delta table at ``path`` in Spark SQL, None before its first commit."""
    return f"delta.`{path}`" if (path / DELTA_LOG).is_dir() else None


def apply_trace_retention(spark: Any, root: Path, retention: timedelta, now: datetime, keep: timedelta) -> None:
    """Deletes the trace days whose whole UTC day and the statistics minutes that are older than ``retention``
    (a partition predicate for the traces: whole files leave the table), then VACUUMs both tables (files no
    version younger than ``keep`` uses)."""
    cutoff = now - retention
    traces, statistics = _table(root / TRACES), _table(root / STATISTICS)
    if traces is not None:
        spark.sql(
            f"DELETE FROM {traces} WHERE date < {sql_literal(cutoff.astimezone(UTC).strftime('%Y-%m-%d'))}"
        ).collect()
    if statistics is not None:
        spark.sql(f"DELETE FROM {statistics} WHERE minute <= {int(cutoff.timestamp() * 1000) - 60_000}").collect()
    for table in (traces, statistics):
        if table is not None:
            spark.sql(f"VACUUM {table} RETAIN {keep.total_seconds() / 3600:.4f} HOURS").collect()


def optimize_traces(spark: Any, root: Path, now: datetime) -> int:
    """Compacts the trace table's files of yesterday and today (UTC) into few, clustered by message id, and the
    statistics' small files; returns how many trace files were rewritten."""
    rewritten = 0
    traces, statistics = _table(root / TRACES), _table(root / STATISTICS)
    if traces is not None:
        since = sql_literal((now - timedelta(days=1)).astimezone(UTC).strftime("%Y-%m-%d"))
        metrics = spark.sql(f"OPTIMIZE {traces} WHERE date >= {since} ZORDER BY (messageId)").collect()[0]
        rewritten = int(metrics["metrics"]["numFilesRemoved"])
    if statistics is not None:
        spark.sql(f"OPTIMIZE {statistics}").collect()
    return rewritten


def maintain_traces(spark: Any, root: Path, retention: timedelta, keep: timedelta) -> None:
    """The periodic pass over the tracking tables: retention, then compaction."""
    now = datetime.now(UTC)
    apply_trace_retention(spark, root, retention, now, keep)
    log.info("tracking: compacted %d trace files", optimize_traces(spark, root, now))


class TrackingJob(LoopingJob):
    """Keeps both tracking queries running (a failed one is started again from its checkpoint), and maintains
    the tracking tables periodically."""

    name = TRACKING_JOB

    def __init__(self, context: PipelineContext) -> None:
        super().__init__(context)
        self._queries: list[Any] = []
        self._next_compaction = time.monotonic() + context.settings.pipeline_tracking_compaction_interval

    def start(self) -> None:
        migrate_tracking(self._context.spark, tracking_root(self._context.settings), STATISTICS_APP_ID)
        super().start()

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
            settings = self._context.settings
            self._next_compaction = time.monotonic() + settings.pipeline_tracking_compaction_interval
            try:
                maintain_traces(
                    self._context.spark,
                    tracking_root(settings),
                    timedelta(seconds=settings.pipeline_trace_retention),
                    timedelta(hours=settings.pipeline_vacuum_retention_hours),
                )
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

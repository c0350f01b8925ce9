"""Moves tracking tables of the earlier layout (Parquet through Spark's file sink, compacted blocks beside it,
statistics in a directory per micro-batch) into the Delta tables of :mod:`hermes.pipeline.tracking_job`, once,
before the tracking queries start; their checkpoints carry on.

The earlier files are read whole, not through the sink's log: retention and compaction had deleted files that
log still lists, and a crashed batch could leave files it does not. Duplicates (a compacted block and the files
it replaced, a crashed batch and its replay) have the same tracking position and are dropped; a file a crash
cut short is skipped. Each table is one Delta commit, after which the earlier files are deleted; a crash
in between only leaves files to delete at the next start.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from hermes.pipeline.lake import DELTA_LOG
from hermes.pipeline.traces import STATISTICS, TRACES

log = logging.getLogger(__name__)

SINK_LOG = "_spark_metadata"
COMPACTED = "traces-compacted"  # the earlier layout's compacted blocks, beside the traces
STATISTICS_COLUMNS = ("topicName", "subscription", "minute", "delivered", "discarded", "failedAttempts", "latencies")


def migrate_tracking(spark: Any, root: Path, statistics_app_id: str) -> None:
    """Moves what the earlier layout left under ``root`` into the Delta tables (nothing when there is none)."""
    _migrate_traces(spark, root)
    _migrate_statistics(spark, root, statistics_app_id)


def _migrate_traces(spark: Any, root: Path) -> None:
    from pyspark.sql import functions as f

    table = root / TRACES
    earlier = sorted(table.glob("topic=*/date=*/*.parquet")) + sorted((root / COMPACTED).glob("topic=*/block=*/*"))
    earlier = [p for p in earlier if p.suffix == ".parquet"]
    if not (table / DELTA_LOG).is_dir() and earlier:
        log.info("tracking: moving %d trace files of the earlier layout into the Delta table", len(earlier))
        events = (
            spark.read.option("ignoreCorruptFiles", "true")
            .parquet(*(str(p) for p in earlier))
            .dropDuplicates(["trackingPartition", "trackingOffset"])
            .withColumn("topic", f.col("topicName"))
            .withColumn("date", f.date_format(f.timestamp_millis(f.col("timestamp")), "yyyy-MM-dd"))
        )
        events.write.format("delta").partitionBy("topic", "date").save(str(table))
        for path in earlier:
            path.unlink(missing_ok=True)
    if (table / DELTA_LOG).is_dir():
        shutil.rmtree(table / SINK_LOG, ignore_errors=True)
        shutil.rmtree(root / COMPACTED, ignore_errors=True)


def _migrate_statistics(spark: Any, root: Path, app_id: str) -> None:
    table = root / STATISTICS
    batches = sorted(table.glob("batch=*"))
    if not batches:
        return
    if not (table / DELTA_LOG).is_dir():
        files = [str(p) for batch in batches for p in sorted(batch.glob("*.parquet"))]
        newest = max(int(b.name.removeprefix("batch=")) for b in batches)
        log.info("tracking: moving %d statistics batches of the earlier layout into the Delta table", len(batches))
        if files:  # the newest batch id as the write's version: the query's replay of it is skipped
            (
                spark.read.option("ignoreCorruptFiles", "true")
                .parquet(*files)
                .select(*STATISTICS_COLUMNS)
                .write.format("delta")
                .option("txnAppId", app_id)
                .option("txnVersion", newest)
                .save(str(table))
            )
    for batch in batches:
        shutil.rmtree(batch, ignore_errors=True)

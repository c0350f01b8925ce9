"""The lake's upkeep, all of it Delta Lake's own SQL on the table (:mod:`hermes.pipeline.lake`):

- retention: ``DELETE`` of a topic's hours older than its retention (a predicate on the partition columns
  only, so Delta drops whole files from the table without rewriting any), then ``VACUUM``, which deletes the
  files no version younger than ``vacuum_retention`` uses;
- compaction: ``OPTIMIZE``, which rewrites each partition's small files into few large ones;
- migration: ``CONVERT TO DELTA`` of a lake that Spark's Parquet file sink wrote (the earlier layout). Delta
  takes the files the sink's ``_spark_metadata`` log lists, so files a crashed batch left are not converted.

Each is one transaction in the table's log, so readers see the table before or after it, never half of it,
and the archive's streaming appends go on meanwhile (appends never conflict with OPTIMIZE; a DELETE that meets
an append to the very partitions it deletes fails, and the next pass deletes them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from hermes.pipeline.files import join_path, plain_root, reachable_files
from hermes.pipeline.lake import DELTA_LOG, Lake, expired_before

log = logging.getLogger(__name__)

SINK_LOG = "_spark_metadata"  # the Parquet file sink's log, in lakes of the earlier layout


def delete_expired(spark: Any, lake: Lake, retention: Mapping[str, timedelta | None], now: datetime) -> int:
    """Deletes the hours of each topic in ``retention`` whose messages are all older than its retention (None
    keeps all; topics not named are kept); returns the rows deleted."""
    deleted = 0
    for topic, keep_for in sorted(retention.items()):
        if keep_for is None:
            continue
        condition = f"topic = {sql_literal(topic)} AND hour < {sql_literal(expired_before(keep_for, now))}"
        result = spark.sql(f"DELETE FROM {lake.table} WHERE {condition}").collect()
        deleted += max(int(result[0][0]), 0) if result else 0
    return deleted


def sql_literal(text: str) -> str:
    """A Spark SQL string literal (Delta's DELETE takes no parameter markers)."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def vacuum(spark: Any, lake: Lake, keep: timedelta) -> None:
    """Deletes the files that no version of the table younger than ``keep`` uses."""
    spark.sql(f"VACUUM {lake.table} RETAIN {keep.total_seconds() / 3600:.4f} HOURS").collect()


def optimize(spark: Any, lake: Lake) -> tuple[int, int]:
    """Compacts the table's small files; returns (files removed, files added)."""
    metrics = spark.sql(f"OPTIMIZE {lake.table}").collect()[0]["metrics"]
    return int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])


def convert_parquet_lake(spark: Any, lake: Lake) -> bool:
    """Converts a lake of the earlier layout (Parquet written by Spark's file sink) to the Delta table in place;
    False when there is nothing to convert. A lake this process cannot reach is left as it is."""
    files = reachable_files(spark, lake.root)
    if files is None:
        return False
    children = files.children(plain_root(lake.root, files))
    if DELTA_LOG in children or SINK_LOG not in children:
        return False
    log.info("archive: converting the Parquet lake %s to a Delta table", lake.root)
    spark.sql(f"CONVERT TO DELTA parquet.`{lake.root}` PARTITIONED BY (topic STRING, hour STRING)").collect()
    log.info("archive: %s is a Delta table now (%s is no longer read)", lake.root, join_path(lake.root, SINK_LOG))
    return True

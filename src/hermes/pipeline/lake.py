"""The offline storage lake: where archived messages live and how to read them (the contract between the
archive, retention, offline retransmission and anyone querying the lake).

Layout, under the lake root (a local directory or any URI Spark can write)::

    <root>/_spark_metadata/                  the file sink's log of committed files (see below)
    <root>/topic=<group.topic>/hour=<yyyy-MM-dd-HH>/part-*.parquet

``hour`` is the UTC hour of the publish timestamp. One Parquet row per message, columns as in ``LAKE_SCHEMA``.

The files are written by Spark's streaming file sink. A crashed batch can leave files behind that the sink
never committed; its ``_spark_metadata`` log lists the committed ones, and Spark reads only those when it
is given the root directory itself. So read the lake through :func:`read_lake` (or ``spark.read.parquet(root)``
on the root), never by globbing the files: that is what makes each message appear exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

HOUR_PATTERN_SPARK = "yyyy-MM-dd-HH"
HOUR_PATTERN = "%Y-%m-%d-%H"
PARTITION_COLUMNS = ("topic", "hour")
METADATA_DIR = "_spark_metadata"

FILE_COLUMNS_DDL = (  # what a Parquet file holds; topic and hour are in its path
    "message_id STRING, publish_timestamp TIMESTAMP, `partition` INT, `offset` BIGINT, `key` BINARY, "
    "schema_version INT, headers MAP<STRING, STRING>, body BINARY"
)
LAKE_COLUMNS_DDL = f"{FILE_COLUMNS_DDL}, topic STRING, hour STRING"


@dataclass(frozen=True)
class Lake:
    root: str  # a local path or a URI (file:, hdfs:, s3a:, ...)

    def topic_path(self, topic: str) -> str:
        return f"{self.root.rstrip('/')}/topic={topic}"


def hour_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(HOUR_PATTERN)


def hour_start(hour: str) -> datetime:
    return datetime.strptime(hour, HOUR_PATTERN).replace(tzinfo=UTC)


def hour_expired(hour: str, retention: timedelta, now: datetime) -> bool:
    """True when every message of the hour is older than the retention."""
    return hour_start(hour) + timedelta(hours=1) <= now - retention


def read_lake(spark: Any, lake: Lake | str | Path, topic: str | None = None) -> Any:
    """The archived messages (of one topic when given), each exactly once. An empty lake reads as empty.
    ``lake`` is a :class:`Lake` or its root (a directory or URI)."""
    if not isinstance(lake, Lake):
        lake = Lake(str(lake))
    if not urlparse(lake.root).scheme and not Path(lake.root).exists():  # spares Spark's warning
        frame = spark.createDataFrame([], LAKE_COLUMNS_DDL)  # nothing archived yet
    else:
        try:
            frame = spark.read.schema(LAKE_COLUMNS_DDL).parquet(lake.root)
        except Exception as exc:  # pyspark's AnalysisException (classic or Connect)
            if "PATH_NOT_FOUND" not in str(exc):
                raise
            frame = spark.createDataFrame([], LAKE_COLUMNS_DDL)
    return frame if topic is None else frame.where(frame.topic == topic)

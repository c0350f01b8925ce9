"""The offline storage lake: where archived messages live and how to read them (the contract between the
archive, its maintenance, offline retransmission and anyone querying the lake).

The lake is one Delta Lake table at the lake root (a local directory or any URI Spark can write)::

    <root>/_delta_log/                       the table's transaction log: which files make each version
    <root>/topic=<group.topic>/hour=<yyyy-MM-dd-HH>/part-*.parquet

partitioned by ``topic`` and ``hour``, the UTC hour of the publish timestamp; one row per message, columns as in
``LAKE_COLUMNS_DDL``. Only the files the log lists for a version are the table: read it as a Delta table
(:func:`read_lake`, ``spark.read.format("delta")``, ``delta.`<root>``` in SQL, or the ``deltalake`` package
without Spark), never by globbing the files.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

HOUR_PATTERN_SPARK = "yyyy-MM-dd-HH"
HOUR_PATTERN = "%Y-%m-%d-%H"
PARTITION_COLUMNS = ("topic", "hour")
DELTA_LOG = "_delta_log"
BODY_COLUMN = "body"  # written without a dictionary or statistics (hermes.pipeline.session)

LAKE_COLUMNS_DDL = (
    "message_id STRING, publish_timestamp TIMESTAMP, `partition` INT, `offset` BIGINT, `key` BINARY, "
    f"schema_version INT, headers MAP<STRING, STRING>, {BODY_COLUMN} BINARY, topic STRING, hour STRING"
)


@dataclass(frozen=True)
class Lake:
    root: str  # a local path or a URI (file:, hdfs:, s3a:, ...); a relative path is made absolute

    def __post_init__(self) -> None:
        # Delta takes a relative path in SQL (delta.`.hermes/pipeline/lake`) for no table (TABLE_OR_VIEW_NOT_FOUND)
        if not urlparse(self.root).scheme and not Path(self.root).is_absolute():
            object.__setattr__(self, "root", str(Path(self.root).absolute()))

    @property
    def table(self) -> str:
        """The table's name in Spark SQL."""
        return f"delta.`{self.root}`"

    def local_path(self) -> Path | None:
        """The root as a local path, when it is one (a plain path or a ``file:`` URI)."""
        parsed = urlparse(self.root)
        if not parsed.scheme:
            return Path(self.root)
        return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def as_lake(lake: Lake | str | Path) -> Lake:
    return lake if isinstance(lake, Lake) else Lake(str(lake))


def hour_of(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(HOUR_PATTERN)


def expired_before(retention: timedelta, now: datetime) -> str:
    """The first hour some message of which may still be within ``retention``: every message of the hours
    before it is older."""
    return hour_of(now - retention)


def lake_version(spark: Any, lake: Lake | str | Path) -> int | None:
    """The table's newest version (None when nothing was archived yet)."""
    lake = as_lake(lake)
    local = lake.local_path()
    if local is not None and not (local / DELTA_LOG).is_dir():  # spares a Spark job
        return None
    try:
        rows = spark.sql(f"DESCRIBE HISTORY {lake.table} LIMIT 1").collect()
    except Exception as exc:  # pyspark's AnalysisException (classic or Connect)
        if not missing_table(exc):
            raise
        return None
    return int(rows[0]["version"]) if rows else None


def newest_version(root: Path, known: int = -1) -> int:
    """A local table's newest version (-1 when it has none), at least ``known``: the first missing commit file
    after its last checkpoint's version (or ``known``) ends it. Not a listing: Delta keeps a month of commit
    files, millions at a 1-s trigger."""
    log = root / DELTA_LOG
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):  # no checkpoint yet
        known = max(known, int(json.loads((log / "_last_checkpoint").read_text(encoding="utf-8"))["version"]))
    while (log / f"{known + 1:020d}.json").exists():
        known += 1
    return known


def commit_info(root: Path, version: int) -> dict[str, Any] | None:
    """The commit info of a local table's version (None when its commit file has none, or is gone: Delta
    removes commit files older than the log's retention)."""
    try:
        lines = (root / DELTA_LOG / f"{version:020d}.json").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        info = json.loads(line).get("commitInfo") if line.strip() else None
        if info is not None:
            return dict(info)
    return None


def read_lake(spark: Any, lake: Lake | str | Path, topic: str | None = None, version: int | None = None) -> Any:
    """The archived messages (of one topic when given), each exactly once; at ``version`` of the table when
    given (time travel), else its newest. An empty lake reads as empty. ``lake`` is a :class:`Lake` or its root
    (a directory or URI)."""
    lake = as_lake(lake)
    local = lake.local_path()
    if local is not None and not (local / DELTA_LOG).is_dir():  # spares Spark's error
        frame = spark.createDataFrame([], LAKE_COLUMNS_DDL)  # nothing archived yet
    else:
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        try:
            frame = reader.load(lake.root)
        except Exception as exc:
            if not missing_table(exc):
                raise
            frame = spark.createDataFrame([], LAKE_COLUMNS_DDL)
    return frame if topic is None else frame.where(frame.topic == topic)


def missing_table(exc: Exception) -> bool:
    """Whether a Spark error says the table (or its path) does not exist."""
    text = str(exc)
    # DELTA_TABLE_NOT_FOUND: the first write has made the log's directory and not committed yet
    markers = ("PATH_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_NOT_FOUND", "is not a Delta table")
    return any(marker in text for marker in markers)

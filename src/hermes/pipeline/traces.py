"""Reading what the tracking job wrote, for the management API: an embedded DuckDB over the files of the
tracking tables' newest versions, as the ``deltalake`` package lists them (no Spark).

Two Delta Lake tables under the tracking root (see :mod:`hermes.pipeline.tracking_job`, which writes them):

- ``traces/``: one row per trace event, partitioned by ``topic`` (qualified) and ``date`` (``yyyy-mm-dd``,
  UTC), Hermes' field names, plus the event's position on the tracking topic (``trackingPartition``,
  ``trackingOffset``), which identifies it;
- ``delivery-statistics/``: partial statistics per subscription and minute, one append per micro-batch.
  Readers sum the partials.

Only the files a version of a table lists are the table (a crashed batch can leave files, compaction and
retention leave replaced ones until VACUUM); readers never glob.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import orjson

from hermes.config import Settings

TRACES = "traces"
STATISTICS = "delivery-statistics"
# The tracking job's name (its checkpoints' directory) and its two streaming queries' checkpoints in it
TRACKING_JOB = "tracking"
TRACE_QUERY = "traces"
STATISTICS_QUERY = "statistics"
UNDELIVERED_LIMIT = 100

# Hermes' trace fields, in Hermes' order; absent values are left out of the JSON, as Hermes does.
TRACE_FIELDS = (
    "messageId",
    "timestamp",
    "subscription",
    "topicName",
    "status",
    "reason",
    "partition",
    "offset",
    "cluster",
    "publishTimestamp",
)


def tracking_root(settings: Settings) -> Path:
    """Next to the lake (which may be remote): DuckDB in management reads these tables from a local path."""
    return (settings.pipeline_tracking_dir or settings.data_dir / "pipeline" / "tracking").absolute()


def checkpoint_root(settings: Settings) -> str:
    """The pipeline's streaming checkpoints, one subdirectory per job (a directory or a URI)."""
    return settings.pipeline_checkpoints or str((settings.data_dir / "pipeline" / "checkpoints").absolute())


def query_checkpoint(settings: Settings, query: str) -> Path | None:
    """The checkpoint of the tracking job's ``query`` (``TRACE_QUERY`` or ``STATISTICS_QUERY``), when it is a
    local directory (a plain path or a ``file:`` URI)."""
    checkpoint = f"{checkpoint_root(settings).rstrip('/')}/{TRACKING_JOB}/{query}"
    parsed = urlparse(checkpoint)
    if not parsed.scheme:
        return Path(checkpoint)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def read_offsets(checkpoint: Path, topic: str) -> dict[int, int] | None:
    """Per partition of ``topic``, the offset up to which a streaming query's table holds its records: the end
    of the query's newest finished micro-batch (Spark's ``offsets/<batch>``, finished once ``commits/<batch>``
    is written). None when the checkpoint holds no finished batch yet."""
    commits = checkpoint / "commits"
    batches = [int(f.name) for f in commits.iterdir() if f.name.isdigit()] if commits.is_dir() else []
    if not batches:
        return None
    try:  # "v1", the batch's metadata, then one line per source: {"<topic>": {"<partition>": <offset>}}
        lines = (checkpoint / "offsets" / str(max(batches))).read_text().splitlines()
        positions = orjson.loads(lines[-1]).get(topic, {})
    except (OSError, IndexError, orjson.JSONDecodeError, AttributeError):
        return None  # a checkpoint pruned or written in a form this reader does not know
    return {int(p): int(o) for p, o in positions.items()}


class TrackingStore:
    """Queries over the tracking tables. Each query opens its own in-memory DuckDB connection (cheap), so the
    store can be shared by threads."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def trace(self, topic: str, subscription: str, message_id: str) -> list[dict[str, Any]]:
        """The message's frontend events and the subscription's consumer events, in time order."""
        rows = self._traces(
            topic,
            message_id,
            "messageId = ? AND (subscription IS NULL OR subscription = ?)",
            [message_id, subscription],
            "timestamp, trackingOffset",
        )
        return [_hermes_fields(r) for r in rows]

    def undelivered(self, topic: str, subscription: str, limit: int = UNDELIVERED_LIMIT) -> list[dict[str, Any]]:
        """The subscription's last ``limit`` DISCARDED events, newest first."""
        rows = self._traces(
            topic,
            None,
            "subscription = ? AND status = 'DISCARDED'",
            [subscription],
            f"timestamp DESC, trackingOffset DESC LIMIT {int(limit)}",
        )
        return [_hermes_fields(r) for r in rows]

    def statistics(self, topic: str, subscription: str, since_ms: int) -> list[dict[str, Any]]:
        """Per-minute delivery statistics of the subscription from ``since_ms``, oldest minute first."""
        query = """
            WITH partials AS (
                SELECT * FROM read_parquet(?) WHERE topicName = ? AND subscription = ? AND minute >= ?
            ),
            counts AS (
                SELECT minute, sum(delivered) AS delivered, sum(discarded) AS discarded,
                       sum(failedAttempts) AS failedAttempts
                FROM partials GROUP BY minute
            ),
            latency AS (
                SELECT minute, quantile_disc(l, 0.5) AS p50, quantile_disc(l, 0.9) AS p90,
                       quantile_disc(l, 0.99) AS p99, max(l) AS maximum
                FROM (SELECT minute, unnest(latencies) AS l FROM partials) GROUP BY minute
            )
            SELECT c.minute, c.delivered, c.discarded, c.failedAttempts, l.p50, l.p90, l.p99, l.maximum
            FROM counts c LEFT JOIN latency l USING (minute) ORDER BY c.minute
        """
        rows = self._query(query, lambda: table_files(self.root / STATISTICS), [topic, subscription, since_ms])
        return [
            {
                "minute": r[0],
                "delivered": int(r[1]),
                "discarded": int(r[2]),
                "failedAttempts": int(r[3]),
                "latency": {"p50": r[4], "p90": r[5], "p99": r[6], "max": r[7]},
            }
            for r in rows
        ]

    def trace_files(self, topic: str, message_id: str | None = None) -> list[str]:
        """The trace table's files that can hold the topic's events (of one message when given: the files'
        message id ranges, narrow after OPTIMIZE's ZORDER, rule out the others)."""
        predicate: list[tuple[str, str, Any]] = [("topic", "=", topic)]
        if message_id is not None:
            predicate.append(("messageId", "=", message_id))
        return table_files(self.root / TRACES, predicate)

    def _traces(
        self, topic: str, message_id: str | None, where: str, params: list[Any], order: str
    ) -> list[dict[str, Any]]:
        columns = ", ".join(f'"{c}"' for c in (*TRACE_FIELDS, "trackingPartition", "trackingOffset"))
        query = f"""
            SELECT {columns} FROM (
                SELECT DISTINCT ON (trackingPartition, trackingOffset) {columns}
                FROM read_parquet(?, union_by_name = true) WHERE {where}
            ) ORDER BY {order}
        """
        names = [*TRACE_FIELDS, "trackingPartition", "trackingOffset"]
        rows = self._query(query, lambda: self.trace_files(topic, message_id), params)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def _query(self, query: str, list_files: Callable[[], list[str]], params: list[Any]) -> list[tuple[Any, ...]]:
        """Runs ``query`` over the files ``list_files()`` names (its first parameter), once more with a fresh
        list when one of them was removed after it was listed (compaction and retention remove files)."""
        import duckdb

        for attempt in range(2):
            files = list_files()
            if not files:
                return []
            try:
                with duckdb.connect() as connection:
                    return connection.execute(query, [files, *params]).fetchall()
            except duckdb.IOException:
                if attempt:
                    raise
        return []


def table_files(table: Path, predicate: list[tuple[str, str, Any]] | None = None) -> list[str]:
    """The data files of the Delta table's newest version (only those whose partition values and column
    statistics can match ``predicate``, conjunctive ``(column, op, value)`` filters); none before its first
    commit."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(table)).file_uris(file_pruning_predicate=predicate)
    except TableNotFoundError:
        return []


def _hermes_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in TRACE_FIELDS if row.get(k) is not None}

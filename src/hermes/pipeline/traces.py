"""Reading what the tracking job wrote, for the management API: an embedded DuckDB over the Parquet files.

Layout under the tracking root (see :mod:`hermes.pipeline.tracking_job`, which writes it):

- ``traces/topic=<qualified topic>/date=<yyyy-mm-dd>/*.parquet``: one row per trace event, Hermes' field
  names, plus the event's position on the tracking topic (``trackingPartition``, ``trackingOffset``), which
  identifies it. A Spark file sink: only files listed in its ``_spark_metadata`` log are committed (a failed
  batch can leave files, and a running batch writes its files in place), so only those are read.
- ``traces-compacted/topic=<qualified topic>/block=<id>/``: the same rows, compacted: one Parquet file sorted
  by ``messageId`` (so a lookup skips most row groups) and a ``_manifest.json`` naming the sink files it
  replaces, written last. Readers take the blocks with a manifest and the sink files no manifest names.
- ``delivery-statistics/batch=<id>/*.parquet``: per-batch partial statistics per subscription and minute,
  written by ``foreachBatch`` (a replayed batch overwrites its own directory). Readers sum the partials.

This module needs ``duckdb`` only (not pyspark), so the management process can use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from hermes.config import Settings

TRACES = "traces"
COMPACTED = "traces-compacted"
MANIFEST = "_manifest.json"
STATISTICS = "delivery-statistics"
SINK_LOG = "_spark_metadata"
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


def committed_files(sink_dir: Path | str) -> list[Path]:
    """The data files a Spark file sink committed, from its metadata log: the newest ``<n>.compact`` file
    holds every earlier entry, plain ``<n>`` files one batch each. Compact files are parsed once per process
    (they grow with the table; the few batch files after them are read every time)."""
    log_dir = Path(sink_dir) / SINK_LOG
    if not log_dir.is_dir():
        return []
    batches: dict[int, Path] = {}
    for entry in log_dir.iterdir():
        stem = entry.name.removesuffix(".compact")
        if stem.isdigit():
            batches[int(stem)] = entry
    first = max((n for n, p in batches.items() if p.name.endswith(".compact")), default=-1)
    files: dict[str, bool] = {}
    for number in sorted(n for n in batches if n >= first):
        try:
            files.update(_log_entries(batches[number]))
        except FileNotFoundError:  # compacted away meanwhile: its entries are in the newer compact file
            continue
    return [Path(unquote(urlparse(path).path)) for path, added in files.items() if added]


_compacted: dict[Path, tuple[str, float, dict[str, bool]]] = {}  # per log: its newest compact file, parsed


def _log_entries(log_file: Path) -> dict[str, bool]:
    """``{path: added}`` of one log file; the first line is the log's version."""
    compact = log_file.name.endswith(".compact")
    if compact:
        mtime = log_file.stat().st_mtime
        cached = _compacted.get(log_file.parent)
        if cached is not None and cached[:2] == (log_file.name, mtime):
            return cached[2]
    entries: dict[str, bool] = {}
    for line in log_file.read_text().splitlines()[1:]:
        if line.strip():
            record = json.loads(line)
            entries[record["path"]] = record.get("action", "add") == "add"
    if compact:  # only the newest compact file of each log matters: it replaces the one cached before
        _compacted[log_file.parent] = (log_file.name, mtime, entries)
    return entries


class TrackingStore:
    """Queries over the tracking tables. Each query opens its own in-memory DuckDB connection (cheap), so the
    store can be shared by threads."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def trace(self, topic: str, subscription: str, message_id: str) -> list[dict[str, Any]]:
        """The message's frontend events and the subscription's consumer events, in time order."""
        rows = self._traces(
            topic,
            "messageId = ? AND (subscription IS NULL OR subscription = ?)",
            [message_id, subscription],
            "timestamp, trackingOffset",
        )
        return [_hermes_fields(r) for r in rows]

    def undelivered(self, topic: str, subscription: str, limit: int = UNDELIVERED_LIMIT) -> list[dict[str, Any]]:
        """The subscription's last ``limit`` DISCARDED events, newest first."""
        rows = self._traces(
            topic,
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
        rows = self._query(query, lambda: statistics_files(self.root), [topic, subscription, since_ms])
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

    def trace_files(self, topic: str) -> list[Path]:
        """The Parquet files holding the topic's trace events: compacted blocks, then the sink's committed
        files no block replaced."""
        blocks, replaced = compacted_blocks(self.root, topic)
        prefix = f"topic={topic}"
        sink = [
            p
            for p in committed_files(self.root / TRACES)
            if p.parent.parent.name == prefix and str(p) not in replaced and p.exists()
        ]
        return blocks + sink

    def _traces(self, topic: str, where: str, params: list[Any], order: str) -> list[dict[str, Any]]:
        columns = ", ".join(f'"{c}"' for c in (*TRACE_FIELDS, "trackingPartition", "trackingOffset"))
        query = f"""
            SELECT {columns} FROM (
                SELECT DISTINCT ON (trackingPartition, trackingOffset) {columns}
                FROM read_parquet(?, union_by_name = true) WHERE {where}
            ) ORDER BY {order}
        """
        names = [*TRACE_FIELDS, "trackingPartition", "trackingOffset"]
        rows = self._query(query, lambda: [str(p) for p in self.trace_files(topic)], params)
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


def statistics_files(root: Path) -> list[str]:
    return sorted(str(p) for p in (root / STATISTICS).glob("batch=*/*.parquet"))


def compacted_blocks(root: Path, topic: str) -> tuple[list[Path], set[str]]:
    """The topic's complete compacted blocks' data files, and the sink files those blocks replace."""
    files: list[Path] = []
    replaced: set[str] = set()
    for block in sorted((root / COMPACTED / f"topic={topic}").glob("block=*")):
        manifest = block / MANIFEST
        if not manifest.is_file():
            continue  # being written, or left by a crash: ignored (and removed by the next compaction)
        replaced.update(json.loads(manifest.read_text())["replaces"])
        files.extend(sorted(block.glob("*.parquet")))
    return files, replaced


def _hermes_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in TRACE_FIELDS if row.get(k) is not None}

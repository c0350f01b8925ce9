"""Counting what the archive committed, for ``hermes_pipeline_archive_records_total`` and ``..._batches_total``.

A lake on a local path is counted from the Delta table's log: every archive commit after the last look (marked
by :mod:`hermes.pipeline.archive_commits`) adds the rows its commit info reports, so each committed record counts
once, whatever restarts, replays and stops happened (a micro-batch is committed once; retention, compaction and
conversion commits are not counted).

A lake elsewhere (``hdfs:``, ``s3a:``, ...) is counted from Spark's progress reports instead, which can miss a
batch that completes while its query is being stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol

from hermes.pipeline.archive_commits import read_mark
from hermes.pipeline.lake import DELTA_LOG, Lake
from hermes.pipeline.prometheus import ARCHIVE_BATCHES, ARCHIVE_LAST_COMMIT, ARCHIVE_RECORDS


class ArchiveCount(Protocol):
    def update(self, query: Any) -> None:
        """Adds what was committed since the last update (``query``: the archive query, or None)."""


def _versions(log_dir: Path, after: int) -> list[int]:
    stems = (p.name.removesuffix(".json") for p in log_dir.glob("*.json"))
    return sorted(v for v in (int(stem) for stem in stems if stem.isdigit()) if v > after)


def _archived_rows(commit: Path) -> int | None:
    """The rows an archive commit appended (None for other commits)."""
    for line in commit.read_text(encoding="utf-8").splitlines():
        info = json.loads(line).get("commitInfo") if line.strip() else None
        if info is not None:
            if read_mark(info.get("userMetadata")) is None:
                return None
            return int(info.get("operationMetrics", {}).get("numOutputRows", 0))
    return None


class LogCount:
    """Exact counts from a local lake's Delta log. What earlier runs committed is not counted."""

    def __init__(self, root: Path) -> None:
        self._log = root / DELTA_LOG
        self._version = max(_versions(self._log, -1), default=-1)

    def update(self, query: Any) -> None:
        versions = _versions(self._log, self._version)
        if not versions:
            return
        self._version = versions[-1]
        commits = [rows for rows in (_archived_rows(self._log / f"{v:020d}.json") for v in versions) if rows]
        if commits:
            ARCHIVE_BATCHES.inc(len(commits))
            ARCHIVE_RECORDS.inc(sum(commits))
            ARCHIVE_LAST_COMMIT.set(time.time())


class ProgressCount:
    """Counts from the progress reports of the archive queries (each run's batches once)."""

    def __init__(self) -> None:
        self._counted: tuple[str, int] = ("", -1)  # (run id, batch id) of the last progress counted

    def update(self, query: Any) -> None:
        if query is None:
            return
        for progress in query.recentProgress:
            key = (progress["runId"], progress["batchId"])
            if key[0] == self._counted[0] and key[1] <= self._counted[1]:
                continue
            self._counted = key
            if progress["numInputRows"]:
                ARCHIVE_RECORDS.inc(progress["numInputRows"])
                ARCHIVE_BATCHES.inc()
                ARCHIVE_LAST_COMMIT.set(time.time())


def archive_count(lake: Lake) -> ArchiveCount:
    local = lake.local_path()
    return ProgressCount() if local is None else LogCount(local)

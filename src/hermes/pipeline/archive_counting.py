"""Counting what the archive committed, for ``hermes_pipeline_archive_records_total`` and ``..._batches_total``.

A lake on a local path is counted from the Delta table's log: every archive commit after the last look (marked
by :mod:`hermes.pipeline.archive_commits`) adds the rows its commit info reports, so each committed record counts
once, whatever restarts, replays and stops happened (a micro-batch is committed once; retention, compaction and
conversion commits are not counted).

A lake elsewhere (``hdfs:``, ``s3a:``, ...) is counted from Spark's progress reports instead, which can miss a
batch that completes while its query is being stopped.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

from hermes.pipeline.archive_commits import read_mark
from hermes.pipeline.lake import Lake, commit_info, newest_version
from hermes.pipeline.prometheus import ARCHIVE_BATCHES, ARCHIVE_LAST_COMMIT, ARCHIVE_RECORDS


class ArchiveCount(Protocol):
    def update(self, query: Any) -> None:
        """Adds what was committed since the last update (``query``: the archive query, or None)."""


def _archived_rows(root: Path, version: int) -> int | None:
    """The rows an archive commit appended (None for other commits)."""
    info = commit_info(root, version)
    if info is None or read_mark(info.get("userMetadata")) is None:
        return None
    return int(info.get("operationMetrics", {}).get("numOutputRows", 0))


class LogCount:
    """Exact counts from a local lake's Delta log. What earlier runs committed is not counted."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._version = newest_version(root)

    def update(self, query: Any) -> None:
        newest = newest_version(self._root, self._version)
        if newest == self._version:
            return
        versions, self._version = range(self._version + 1, newest + 1), newest
        commits = [rows for rows in (_archived_rows(self._root, v) for v in versions) if rows]
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

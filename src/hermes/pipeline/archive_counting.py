"""Counting what the archive committed, for ``hermes_pipeline_archive_records_total`` and ``..._batches_total``.

A lake on a local path is counted from the sink's log: every file it lists that it did not list at the last
look adds the rows in its Parquet footer, so each committed record counts once, whatever restarts, replays
and stops happened (files that compaction writes hold records counted before, and are skipped). Look again
after stopping the query and before retention removes files, so nothing committed leaves the log uncounted.

A lake elsewhere (``hdfs:``, ``s3a:``, ...) is counted from Spark's progress reports instead, which can miss a
batch that completes while its query is being stopped.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from hermes.pipeline.lake import METADATA_DIR
from hermes.pipeline.lake_compaction import COMPACTED_PREFIX
from hermes.pipeline.prometheus import ARCHIVE_BATCHES, ARCHIVE_LAST_COMMIT, ARCHIVE_RECORDS
from hermes.pipeline.traces import committed_files

log = logging.getLogger(__name__)


class ArchiveCount(Protocol):
    def update(self, query: Any) -> None:
        """Adds what was committed since the last update (``query``: the archive query, or None)."""


def _newest_batch(log_dir: Path) -> int:
    stems = (p.name.removesuffix(".compact") for p in log_dir.glob("[0-9]*"))
    return max((int(stem) for stem in stems if stem.isdigit()), default=-1)


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except FileNotFoundError:  # removed since the log was read: not by this job, which counts first
        log.warning("archive: %s is listed in the sink's log but gone", path)
        return 0


class LogCount:
    """Exact counts from a local lake's sink log. What earlier runs committed is not counted."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._listed = set(committed_files(root))
        self._batch = _newest_batch(root / METADATA_DIR)

    def update(self, query: Any) -> None:
        batch = _newest_batch(self._root / METADATA_DIR)
        if batch <= self._batch:
            return  # nothing committed since (retention and compaction only take entries out, or swap them)
        ARCHIVE_BATCHES.inc(batch - self._batch)
        self._batch = batch
        listed = set(committed_files(self._root))
        new = [f for f in listed - self._listed if not f.name.startswith(COMPACTED_PREFIX)]
        self._listed = listed
        records = sum(_rows(f) for f in new)
        if records:
            ARCHIVE_RECORDS.inc(records)
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


def archive_count(lake_root: str) -> ArchiveCount:
    parsed = urlparse(lake_root)
    if not parsed.scheme or parsed.scheme == "file":
        return LogCount(Path(unquote(parsed.path) if parsed.scheme else lake_root))
    return ProgressCount()

"""Retention of the tracking tables (layout in :mod:`hermes.pipeline.traces`), run by the tracking job before
each compaction:

- sink files that a compacted block replaces are deleted once that block is older than this pass (a reader
  that listed the files just before the block was complete has had a whole compaction interval to read);
- a compacted block goes when its newest event is older than the retention: first its manifest (so readers
  stop using it), then its files;
- a sink ``date=`` partition goes when its whole UTC day is older than the retention;
- a statistics ``batch=`` directory goes when its newest minute is older than the retention.

Nothing here rewrites the sink's ``_spark_metadata`` log while the trace query appends to it: readers take the
files the log lists that still exist (and a Spark reader of the root needs ``spark.sql.files.ignoreMissingFiles``),
and the sink itself drops log entries older than the retention when it compacts its log (its ``retention``
option, set by :func:`hermes.pipeline.tracking_job.start_tracking`).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hermes.pipeline.traces import COMPACTED, MANIFEST, STATISTICS, TRACES, compacted_blocks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Removed:
    replaced_files: int = 0
    blocks: int = 0
    days: int = 0
    statistics: int = 0

    def __bool__(self) -> bool:
        return any((self.replaced_files, self.blocks, self.days, self.statistics))


def _newest(files: list[Path], column: str) -> int | None:
    """The largest value of an integer column over Parquet files (one column read, not the rows)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    values = [pc.max(pq.read_table(f, columns=[column]).column(column)).as_py() for f in files]
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _topics(root: Path) -> set[str]:
    names = {p.name for p in (root / TRACES).glob("topic=*")} | {p.name for p in (root / COMPACTED).glob("topic=*")}
    return {name.removeprefix("topic=") for name in names}


def _remove_replaced(root: Path, topic: str) -> int:
    removed = 0
    for name in compacted_blocks(root, topic)[1]:
        path = Path(name)
        if path.is_file():
            path.unlink()
            path.with_name(f".{path.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
            removed += 1
    return removed


def _remove_expired_blocks(root: Path, topic: str, cutoff_ms: int) -> int:
    removed = 0
    for block in sorted((root / COMPACTED / f"topic={topic}").glob("block=*")):
        manifest = block / MANIFEST
        if not manifest.is_file():
            continue  # being written, or left by a crash (compaction removes those)
        newest = _newest(sorted(block.glob("*.parquet")), "timestamp")
        if newest is None or newest < cutoff_ms:
            manifest.unlink()  # from here on the block no longer counts for readers
            shutil.rmtree(block, ignore_errors=True)
            removed += 1
    return removed


def _remove_expired_days(root: Path, topic: str, cutoff: datetime) -> int:
    removed = 0
    for day in sorted((root / TRACES / f"topic={topic}").glob("date=*")):
        try:
            start = datetime.strptime(day.name.removeprefix("date="), "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            log.warning("trace retention: %s is not a date partition; kept", day)
            continue
        if start + timedelta(days=1) <= cutoff:
            shutil.rmtree(day, ignore_errors=True)
            removed += 1
    return removed


def _remove_expired_statistics(root: Path, cutoff_ms: int) -> int:
    removed = 0
    for batch in sorted((root / STATISTICS).glob("batch=*")):
        files = sorted(batch.glob("*.parquet"))
        if not files:
            continue  # being written by its micro-batch
        newest = _newest(files, "minute")
        if newest is None or newest + 60_000 <= cutoff_ms:
            shutil.rmtree(batch, ignore_errors=True)
            removed += 1
    return removed


def apply_trace_retention(root: Path, retention: timedelta, now: datetime) -> Removed:
    """Removes what the tracking tables under ``root`` no longer need: events older than ``retention`` and
    sink files already compacted. Run it where compaction runs (never both at once)."""
    cutoff = now - retention
    cutoff_ms = int(cutoff.timestamp() * 1000)
    replaced = blocks = days = 0
    for topic in sorted(_topics(root)):
        replaced += _remove_replaced(root, topic)
        blocks += _remove_expired_blocks(root, topic, cutoff_ms)
        days += _remove_expired_days(root, topic, cutoff)
    return Removed(replaced, blocks, days, _remove_expired_statistics(root, cutoff_ms))

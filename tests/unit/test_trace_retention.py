"""Retention of the tracking tables over files in their layout (the Spark test covers it on a live job)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hermes.pipeline.trace_retention import apply_trace_retention
from hermes.pipeline.traces import COMPACTED, MANIFEST, STATISTICS, TRACES

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def write(path: Path, **columns: list[int]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def test_expired_statistics_batches_blocks_and_days_go_and_the_rest_stays(tmp_path: Path) -> None:
    minute = 60_000
    old_batch = write(tmp_path / STATISTICS / "batch=1" / "part-0.parquet", minute=[ms(NOW - timedelta(days=2))])
    mixed_batch = write(
        tmp_path / STATISTICS / "batch=2" / "part-0.parquet",
        minute=[ms(NOW - timedelta(days=2)), ms(NOW - timedelta(hours=1)) // minute * minute],
    )
    (tmp_path / STATISTICS / "batch=3").mkdir()  # its micro-batch is still writing
    topic = tmp_path / COMPACTED / "topic=g.t"
    old_block = write(topic / "block=1" / "part-0.parquet", timestamp=[ms(NOW - timedelta(days=3))]).parent
    (old_block / MANIFEST).write_text(json.dumps({"replaces": []}))
    unfinished = write(topic / "block=2" / "part-0.parquet", timestamp=[ms(NOW - timedelta(days=3))]).parent
    days = tmp_path / TRACES / "topic=g.t"
    for day in ("date=2026-11-21", "date=2026-11-22", "date=2026-11-23", "not-a-date"):
        (days / day).mkdir(parents=True)

    removed = apply_trace_retention(tmp_path, timedelta(days=1), NOW)

    assert (removed.statistics, removed.blocks, removed.days) == (1, 1, 1)
    assert not old_batch.parent.exists() and mixed_batch.exists() and (tmp_path / STATISTICS / "batch=3").exists()
    assert not old_block.exists() and unfinished.exists(), "a block without its manifest is compaction's to clear"
    assert sorted(p.name for p in days.iterdir()) == ["date=2026-11-22", "date=2026-11-23", "not-a-date"]
    assert not apply_trace_retention(tmp_path, timedelta(days=1), NOW), "nothing more to remove"


def test_an_empty_tracking_directory_has_nothing_to_remove(tmp_path: Path) -> None:
    assert not apply_trace_retention(tmp_path / "missing", timedelta(days=7), NOW)

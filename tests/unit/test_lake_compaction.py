"""What a compaction pass cleans up first, over a lake's files and sink log (no Spark needed for that part)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hermes.pipeline.lake import METADATA_DIR
from hermes.pipeline.lake_compaction import WORK_DIR, compact_lake, compaction_due, listed_paths
from hermes.pipeline.retention import LocalFiles

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def entry(path: Path) -> str:
    return json.dumps({"path": path.as_uri(), "size": 1, "isDir": False, "modificationTime": 0, "action": "add"})


def test_a_pass_deletes_what_earlier_passes_replaced_or_wrote_without_switching_the_log(tmp_path: Path) -> None:
    hour = tmp_path / "topic=g.t" / "hour=2026-11-23-11"  # still open for compaction: nothing to merge
    hour.mkdir(parents=True)
    kept, replaced, orphan, merged = (
        hour / n for n in ("part-1.parquet", "part-0.parquet", "c-1.parquet", "c-2.parquet")
    )
    for f in (kept, replaced, orphan, merged):
        f.write_bytes(b"PAR1")
    log = tmp_path / METADATA_DIR
    log.mkdir()
    (log / "1.compact").write_text("\n".join(["v1", entry(kept), entry(merged)]))
    records = tmp_path / WORK_DIR / "records"
    records.mkdir(parents=True)
    # a pass that switched the log (part-0 replaced by c-2), and one that died before its switch (c-1)
    (records / "1.json").write_text(json.dumps({"replaced": [replaced.as_uri()], "written": [merged.as_uri()]}))
    (records / "2.json").write_text(json.dumps({"replaced": [kept.as_uri()], "written": [orphan.as_uri()]}))
    (tmp_path / WORK_DIR / "staging" / "x").mkdir(parents=True)
    files = LocalFiles()
    assert compaction_due(files, str(tmp_path), NOW)

    result = compact_lake(None, files, str(tmp_path), NOW)  # no hour to merge: Spark is not called

    assert result.removed == 2 and (result.hours, result.files) == (0, 0)
    assert kept.exists() and merged.exists(), "files the log lists are never deleted"
    assert not replaced.exists() and not orphan.exists()
    assert not any(records.iterdir()) and not (tmp_path / WORK_DIR / "staging").exists()
    assert listed_paths(files, str(log)) == {kept.as_uri(), merged.as_uri()}
    assert not compaction_due(files, str(tmp_path), NOW)

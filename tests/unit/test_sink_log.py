"""Which files of a Spark file sink are committed, from its ``_spark_metadata`` log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes.pipeline.traces import committed_files

pytestmark = pytest.mark.unit


def write_log(log_dir: Path, name: str, *entries: tuple[str, str]) -> None:
    lines = ["v1", *(json.dumps({"path": f"file://{path}", "size": 1, "action": action}) for path, action in entries)]
    (log_dir / name).write_text("\n".join(lines))


def test_the_newest_compact_file_and_the_batches_after_it(tmp_path: Path) -> None:
    log_dir = tmp_path / "_spark_metadata"
    log_dir.mkdir()
    write_log(log_dir, "8", ("/t/old-uncompacted.parquet", "add"))  # folded into 9.compact
    write_log(log_dir, "9.compact", ("/t/a.parquet", "add"), ("/t/b%20c.parquet", "add"))
    write_log(log_dir, "10", ("/t/d.parquet", "add"))
    write_log(log_dir, "11", ("/t/a.parquet", "delete"))
    (log_dir / ".11.crc").write_text("")
    assert committed_files(tmp_path) == [Path("/t/b c.parquet"), Path("/t/d.parquet")]


def test_a_table_not_written_yet(tmp_path: Path) -> None:
    assert committed_files(tmp_path / "missing") == []

"""What the data directory keeps is its owner's alone: the directory 0700, the metadata store, its WAL and the
journal 0600, also when they were made by an older version with the umask's modes."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from hermes.config import load_settings
from hermes.domain.topic import Group
from hermes.frontend.journal import Journal
from hermes.metadata.sqlite import SqliteMetadataRepository
from hermes.runtime import check_data_dir

pytestmark = pytest.mark.unit


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_data_directory_and_its_files_are_private(tmp_path: Path) -> None:
    os.umask(umask := os.umask(0o022))  # the usual umask, whatever the test runner's
    try:
        fresh, old = tmp_path / "fresh" / "data", tmp_path / "old"
        old.mkdir(mode=0o755)
        for data_dir in (fresh, old):
            check_data_dir(load_settings({"data_dir": data_dir}))
            assert _mode(data_dir) == 0o700
        (old / "metadata.sqlite3").touch(mode=0o644)
        repository = SqliteMetadataRepository(old / "metadata.sqlite3")
        reader = sqlite3.connect(old / "metadata.sqlite3")  # open: the -wal and -shm files stay
        reader.execute("SELECT * FROM groups").fetchall()
        repository.create_group(Group("g"))
        stored = [old / f"metadata.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]
        assert {path.name: _mode(path) for path in stored} == {path.name: 0o600 for path in stored}
        reader.close()
        repository.close()
        journal = Journal(old / "journal", 1 << 20)
        journal.recover()
        assert [_mode(path) for path in (old / "journal").iterdir()] == [0o600]
        journal.close()
    finally:
        os.umask(umask)

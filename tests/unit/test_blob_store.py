"""The local blob store's writes are atomic: a failed or crashed upload leaves nothing, and a reader never sees
half a blob."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes.offload.local import LocalBlobStore

pytestmark = pytest.mark.unit

BLOB_ID = "6f1c1b8e-3c39-4b8e-9a53-2a4a0d6c1f00"


def test_a_blob_is_stored_read_and_deleted(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    assert store.put("g.t", BLOB_ID, [b"ab", b"cd"]) == 4
    info = store.info(BLOB_ID)
    assert info is not None
    assert (info.topic, info.size) == ("g.t", 4)
    assert b"".join(store.read(info, chunk_size=3)) == b"abcd"
    store.delete_topic("g.t")
    assert store.info(BLOB_ID) is None
    assert store.topics() == []


def test_an_upload_failing_half_way_leaves_nothing_and_keeps_the_earlier_blob(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("g.t", BLOB_ID, [b"old"])

    def broken() -> Iterator[bytes]:
        yield b"new, half"
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        store.put("g.t", BLOB_ID, broken())
    info = store.info(BLOB_ID)
    assert info is not None
    assert b"".join(store.read(info)) == b"old"
    assert list((tmp_path / ".partial").iterdir()) == []


def test_the_partial_files_of_a_crashed_process_are_removed_on_opening(tmp_path: Path) -> None:
    LocalBlobStore(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    (tmp_path / ".partial" / f"{int(dead.stdout)}.abc").write_bytes(b"half a blob")
    alive = tmp_path / ".partial" / "1.def"  # pid 1 lives: another process's upload in progress
    alive.write_bytes(b"in progress")
    store = LocalBlobStore(tmp_path)
    assert [p.name for p in (tmp_path / ".partial").iterdir()] == ["1.def"]
    assert store.topics() == []


def test_expiry_deletes_only_blobs_stored_before_the_cut(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    store.put("g.t", BLOB_ID, [b"x"])
    info = store.info(BLOB_ID)
    assert info is not None
    assert store.expire("g.t", info.stored_at - 1) == 0
    assert store.expire("g.t", info.stored_at + 1) == 1
    assert store.info(BLOB_ID) is None

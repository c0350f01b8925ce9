"""The blob stores of offloaded messages, one contract for both: the local directory and an S3-compatible bucket
(moto's S3 server, a real HTTP server in this process, spoken to by boto3 as to AWS). Writes are atomic: a failed
upload leaves nothing and keeps the earlier blob; a reader never sees half a blob."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes.broker.embedded import free_port
from hermes.offload.blobs import BlobStore
from hermes.offload.local import LocalBlobStore
from hermes.offload.s3 import S3BlobStore
from tests.support.hermes import unique

pytestmark = pytest.mark.integration

BLOB_ID = "6f1c1b8e-3c39-4b8e-9a53-2a4a0d6c1f00"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> BlobStore:
    if request.param == "local":
        return LocalBlobStore(tmp_path)
    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test")):
        monkeypatch.setenv(name, value)
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = unique("bucket")
    import boto3

    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return S3BlobStore(bucket, "offload/", endpoint, "us-east-1")


def test_a_blob_is_stored_read_and_deleted_with_its_topic(store: BlobStore) -> None:
    assert store.put("g.t", BLOB_ID, [b"ab", b"cd"]) == 4
    info = store.info(BLOB_ID)
    assert info is not None
    assert (info.topic, info.size) == ("g.t", 4)
    assert b"".join(store.read(info, chunk_size=3)) == b"abcd"
    assert store.topics() == ["g.t"]
    store.delete_topic("g.t")
    assert store.info(BLOB_ID) is None
    assert store.topics() == []


def test_a_large_blob_goes_in_parts(store: BlobStore) -> None:
    chunk = bytes(range(256)) * 4096  # 1 MiB
    assert store.put("g.t", BLOB_ID, [chunk] * 12) == 12 * len(chunk)  # over boto3's multipart threshold
    info = store.info(BLOB_ID)
    assert info is not None
    assert b"".join(store.read(info)) == chunk * 12


def test_an_upload_failing_half_way_leaves_nothing_and_keeps_the_earlier_blob(store: BlobStore) -> None:
    store.put("g.t", BLOB_ID, [b"old"])

    def broken() -> Iterator[bytes]:
        yield b"new, half" * 1_000_000
        raise ConnectionResetError("the client went away")

    with pytest.raises(ConnectionResetError):
        store.put("g.t", BLOB_ID, broken())
    info = store.info(BLOB_ID)
    assert info is not None
    assert b"".join(store.read(info)) == b"old"


def test_expiry_deletes_only_blobs_stored_before_the_cut(store: BlobStore) -> None:
    store.put("g.t", BLOB_ID, [b"x"])
    info = store.info(BLOB_ID)
    assert info is not None
    assert store.expire("g.t", info.stored_at - 1) == 0
    assert store.expire("g.t", info.stored_at + 1) == 1
    assert store.info(BLOB_ID) is None


def test_the_partial_files_of_a_crashed_process_are_removed_on_opening(tmp_path: Path) -> None:
    LocalBlobStore(tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    (tmp_path / ".partial" / f"{int(dead.stdout)}.abc").write_bytes(b"half a blob")
    alive = tmp_path / ".partial" / "1.def"  # pid 1 lives: another process's upload in progress
    alive.write_bytes(b"in progress")
    store = LocalBlobStore(tmp_path)
    assert [p.name for p in (tmp_path / ".partial").iterdir()] == ["1.def"]
    assert store.topics() == []

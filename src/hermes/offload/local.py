"""Blobs as files in a local directory (``<data dir>/offload``): ``<topic>/<message id>``.

A blob is written to ``.partial/<pid>.<random>`` and renamed into place once complete, so a reader never sees a
half-written one; the partial files of processes that died are removed when a store opens the directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from hermes.errors import OffloadedMessageNotFound
from hermes.offload.blobs import BlobInfo

PARTIAL = ".partial"


class LocalBlobStore:
    def __init__(self, root: Path) -> None:
        self._root = root
        self._partial = root / PARTIAL
        self._partial.mkdir(parents=True, exist_ok=True)
        self._remove_orphans()

    def put(self, topic: str, blob_id: str, chunks: Iterable[bytes]) -> int:
        partial = self._partial / f"{os.getpid()}.{uuid.uuid4().hex}"
        size = 0
        try:
            with partial.open("wb") as out:
                for chunk in chunks:
                    out.write(chunk)
                    size += len(chunk)
                out.flush()
                os.fsync(out.fileno())  # renamed only once on disk: a power cut leaves the old blob or the new
            directory = self._root / topic
            directory.mkdir(exist_ok=True)
            partial.rename(directory / blob_id)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        return size

    def info(self, blob_id: str) -> BlobInfo | None:
        for topic in self.topics():
            try:
                stat = (self._root / topic / blob_id).stat()
            except FileNotFoundError:
                continue
            return BlobInfo(topic, blob_id, stat.st_size, stat.st_mtime)
        return None

    def read(self, info: BlobInfo, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        try:
            source = (self._root / info.topic / info.blob_id).open("rb")
        except FileNotFoundError:
            raise OffloadedMessageNotFound(f"offloaded message {info.blob_id} not found") from None
        with source:
            while chunk := source.read(chunk_size):
                yield chunk

    def delete(self, info: BlobInfo) -> None:
        (self._root / info.topic / info.blob_id).unlink(missing_ok=True)

    def topics(self) -> list[str]:
        with os.scandir(self._root) as entries:
            return [entry.name for entry in entries if entry.name != PARTIAL and entry.is_dir()]

    def expire(self, topic: str, stored_before: float) -> int:
        expired = 0
        with contextlib.suppress(FileNotFoundError), os.scandir(self._root / topic) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    if entry.stat().st_mtime < stored_before:
                        os.unlink(entry.path)
                        expired += 1
        return expired

    def delete_topic(self, topic: str) -> None:
        shutil.rmtree(self._root / topic, ignore_errors=True)

    def _remove_orphans(self) -> None:
        """Partial files of processes that no longer run (another frontend worker's may be in progress)."""
        for partial in self._partial.iterdir():
            pid = partial.name.split(".", 1)[0]
            if not pid.isdigit() or not _alive(int(pid)):
                partial.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

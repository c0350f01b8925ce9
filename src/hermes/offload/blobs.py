"""The blob-store interface: offloaded messages, kept per topic and named by message id (a UUID).

A blob is whatever bytes the offload service was given (a BSON document); the store does not look inside. Writes
are atomic: a reader sees a whole blob or none, and a writer that fails or crashes half way leaves nothing."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class BlobInfo:
    topic: str
    blob_id: str
    size: int
    stored_at: float  # epoch seconds


class BlobStore(Protocol):
    """Blocking calls: the event loop runs them in a thread."""

    def put(self, topic: str, blob_id: str, chunks: Iterable[bytes]) -> int:
        """Stores the chunks as one blob (replacing one of the same id); returns its size."""
        ...

    def info(self, blob_id: str) -> BlobInfo | None:
        """The blob's topic, size and age, or None when there is none of that id."""
        ...

    def read(self, info: BlobInfo, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The blob's bytes, in chunks (raises ``BlobMissing`` when it went away meanwhile)."""
        ...

    def delete(self, info: BlobInfo) -> None: ...

    def topics(self) -> list[str]:
        """The topics that have blobs."""
        ...

    def expire(self, topic: str, stored_before: float) -> int:
        """Deletes the topic's blobs stored before that epoch time; returns how many."""
        ...

    def delete_topic(self, topic: str) -> None: ...

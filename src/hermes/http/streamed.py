"""Request bodies sent from files: a body kept in a file goes to the connection a chunk at a time, as fast as the
peer takes it, instead of being read whole into memory first."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator
from typing import IO

CHUNK = 1 << 20


class FileRegion:
    """``size`` bytes of an open file from ``offset``. Read with ``pread``, so concurrent sends of one body (a
    BROADCAST's) never share a file position. It owns the file: ``close`` closes it and calls ``on_close`` once;
    so does the garbage collector if it is dropped unclosed (a cancelled consumer)."""

    def __init__(self, file: IO[bytes], offset: int, size: int, on_close: Callable[[], None] | None = None) -> None:
        self.offset = offset
        self.size = size
        self._fd = file.fileno()
        self._closer = weakref.finalize(self, _close, file, on_close)

    def chunks(self, chunk: int = CHUNK) -> Iterator[bytes]:
        position, end = self.offset, self.offset + self.size
        while position < end:
            data = os.pread(self._fd, min(chunk, end - position), position)
            if not data:
                raise OSError(f"the file ends {end - position} bytes short of its body")
            position += len(data)
            yield data

    def read(self) -> bytes:
        """The whole region, where it is needed whole (a filter reads it, an Avro record is converted)."""
        return b"".join(self.chunks(max(self.size, 1)))

    def close(self) -> None:
        self._closer()


def _close(file: IO[bytes], on_close: Callable[[], None] | None) -> None:
    file.close()
    if on_close is not None:
        on_close()


class StreamedBody:
    """A body of in-memory parts and file regions, e.g. a BATCH's JSON array around a stored message."""

    def __init__(self, parts: tuple[bytes | FileRegion, ...]) -> None:
        self.parts = parts
        self.size = sum(len(part) if isinstance(part, bytes) else part.size for part in parts)

    def chunks(self) -> Iterator[bytes]:
        for part in self.parts:
            if isinstance(part, bytes):
                if part:
                    yield part
            else:
                yield from part.chunks()


Body = bytes | StreamedBody

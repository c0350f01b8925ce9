"""Which offsets may be committed: only those below the lowest message still in flight."""

from __future__ import annotations

from collections.abc import Iterable

Partition = tuple[str, int]


class OffsetTracker:
    """Per partition, the offsets read but not yet finished (delivered, discarded or filtered), and of those the
    ones whose delivery started (the rest wait in a read-ahead).

    The committable offset of a partition is the lowest unfinished offset, or one past the highest
    finished offset when nothing is unfinished: committing it can never skip an unfinished message.
    """

    def __init__(self) -> None:
        self._inflight: dict[Partition, set[int]] = {}
        self._started: dict[Partition, set[int]] = {}
        self._next: dict[Partition, int] = {}
        self._committed: dict[Partition, int] = {}

    def read(self, partition: Partition, offset: int) -> None:
        self._inflight.setdefault(partition, set()).add(offset)
        self._next[partition] = max(self._next.get(partition, 0), offset + 1)

    def start(self, partition: Partition, offset: int) -> None:
        self._started.setdefault(partition, set()).add(offset)

    def is_started(self, partition: Partition, offset: int) -> bool:
        return offset in self._started.get(partition, ())

    def finish(self, partition: Partition, offset: int) -> None:
        self._inflight.get(partition, set()).discard(offset)
        self._started.get(partition, set()).discard(offset)

    def pending(self, partition: Partition, offset: int) -> bool:
        """Whether ``offset`` was read and is not finished (false once its partition was forgotten)."""
        return offset in self._inflight.get(partition, ())

    def partitions(self) -> set[Partition]:
        return set(self._next) | set(self._inflight)

    def started(self, partitions: Iterable[Partition]) -> int:
        """Deliveries under way in ``partitions``."""
        return sum(len(self._started.get(p, ())) for p in partitions)

    def inflight(self) -> int:
        return sum(len(s) for s in self._inflight.values())

    def committable(self) -> dict[Partition, int]:
        """Offsets that advanced since the last ``mark_committed``."""
        out = {}
        for partition, nxt in self._next.items():
            pending = self._inflight.get(partition)
            offset = min(pending) if pending else nxt
            if self._committed.get(partition) != offset:
                out[partition] = offset
        return out

    def mark_committed(self, offsets: dict[Partition, int]) -> None:
        self._committed.update(offsets)

    def forget(self, partitions: Iterable[Partition]) -> None:
        for partition in partitions:
            self._inflight.pop(partition, None)
            self._started.pop(partition, None)
            self._next.pop(partition, None)
            self._committed.pop(partition, None)

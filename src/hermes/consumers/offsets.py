"""Which offsets may be committed: only those below the lowest message still in flight.

Offsets come in lists of one partition's (what one read or one batch holds of it): a set operation per list,
not a Python call per message."""

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
        # Counts reads, finishes and forgets: unchanged, nothing new is committable and nothing moved in flight
        # (a thousand subscriptions at rest are looked at every second by the commits and the metrics)
        self.changes = 0

    def read(self, partition: Partition, offsets: list[int]) -> None:
        """``offsets`` (not empty) were read."""
        self.changes += 1
        self._inflight.setdefault(partition, set()).update(offsets)
        self._next[partition] = max(self._next.get(partition, 0), max(offsets) + 1)

    def finish(self, partition: Partition, offsets: list[int]) -> None:
        self.changes += 1
        self._inflight.get(partition, set()).difference_update(offsets)
        self._started.get(partition, set()).difference_update(offsets)

    def finish_one(self, partition: Partition, offset: int) -> None:
        """``finish`` of one offset (a SERIAL delivery's: no list to build)."""
        self.changes += 1
        self._inflight.get(partition, set()).discard(offset)
        self._started.get(partition, set()).discard(offset)

    def pending(self, partition: Partition, offset: int) -> bool:
        """Whether ``offset`` was read and is not finished (false once its partition was forgotten)."""
        return offset in self._inflight.get(partition, ())

    def all_pending(self, partition: Partition, offsets: list[int]) -> bool:
        return self._inflight.get(partition, set()).issuperset(offsets)

    def take(self, partition: Partition, offsets: list[int], revoking: bool) -> list[bool]:
        """Of ``offsets``, which to deliver now: pending, and started already or (unless the partition is being
        revoked) started now."""
        pending = self._inflight.get(partition, set())
        started = self._started.setdefault(partition, set())
        taken = [offset in pending and (not revoking or offset in started) for offset in offsets]
        if not revoking:
            started.update(offset for offset, take in zip(offsets, taken, strict=True) if take)
        return taken

    def take_one(self, partition: Partition, offset: int, revoking: bool) -> bool:
        """``take`` of one offset (a SERIAL delivery's: no list to build)."""
        started = self._started.setdefault(partition, set())
        if offset not in self._inflight.get(partition, ()):
            return False
        if revoking:
            return offset in started
        started.add(offset)
        return True

    def position(self, partition: Partition) -> int | None:
        """The offset a commit would write now (None: nothing read of it)."""
        pending = self._inflight.get(partition)
        return min(pending) if pending else self._next.get(partition)

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

    def committed(self) -> dict[Partition, int]:
        return dict(self._committed)

    def mark_committed(self, offsets: dict[Partition, int]) -> None:
        self._committed.update(offsets)

    def forget(self, partitions: Iterable[Partition]) -> None:
        self.changes += 1
        for partition in partitions:
            self._inflight.pop(partition, None)
            self._started.pop(partition, None)
            self._next.pop(partition, None)
            self._committed.pop(partition, None)

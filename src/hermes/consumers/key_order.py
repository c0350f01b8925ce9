"""Ordering by key (``subscriptionPolicy.ordering: KEY``): which of a SERIAL consumer's messages wait behind an
earlier message with the same Kafka key (the publisher's ``Partition-Key``), in order, until its delivery ends.

A key is busy from the start of one of its deliveries until the last message held back behind it has been
delivered: each delivery's end hands the key to the next held message, which starts before anything else."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from hermes.domain.message import Message

Item = tuple[Message, int]  # a message and the generation it was read in


class KeyOrder:
    def __init__(self) -> None:
        self._busy: dict[bytes, deque[Item]] = {}  # the busy keys, with the messages held back behind each
        self._ready: deque[tuple[bytes, Item]] = deque()  # held messages whose turn came, holding their key

    def ready(self) -> Item | None:
        """The oldest held message whose turn came (its delivery holds its key), or None."""
        return self._ready.popleft()[1] if self._ready else None

    def hold(self, item: Item, key: bytes) -> bool:
        """Whether the message must wait behind ``key`` (then it is kept here until its turn); if not, its
        delivery holds the key from now on."""
        if (held := self._busy.get(key)) is not None:
            held.append(item)
            return True
        self._busy[key] = deque()
        return False

    def release(self, key: bytes) -> None:
        """The delivery holding ``key`` ended, or never started: the next message held behind it gets its turn,
        or the key is free."""
        if held := self._busy[key]:
            self._ready.append((key, held.popleft()))
        else:
            del self._busy[key]

    def drop(self, void: Callable[[Message, int], bool]) -> list[Message]:
        """Drops the held messages ``void`` names and returns them. A key stays busy while its delivery runs."""
        dropped: list[Message] = []
        for key, held in self._busy.items():
            kept: deque[Item] = deque()
            for item in held:
                if void(*item):
                    dropped.append(item[0])
                else:
                    kept.append(item)
            self._busy[key] = kept
        ready, self._ready = self._ready, deque()
        for key, item in ready:
            if void(*item):
                dropped.append(item[0])
                self.release(key)
            else:
                self._ready.append((key, item))
        return dropped

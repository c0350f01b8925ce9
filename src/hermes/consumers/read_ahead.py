"""A SERIAL consumer's read-ahead: messages read from Kafka beyond its inflightSize window, held on the event loop
until a delivery ends, so that the next delivery starts at once.

The Kafka thread is woken to read more only when the buffer is half empty: once per many finished deliveries,
not once per delivery (each wake-up is a GIL hand-off with the busy loop). Bytes are counted from the moment the
thread reads the messages, before the loop gets them, so that its next read already sees them.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Container, Iterable

from hermes.domain.message import Message


class ReadAhead:
    def __init__(self, messages: int, max_bytes: int) -> None:
        self.messages = messages
        self.max_bytes = max_bytes
        self._queue: deque[tuple[Message, int]] = deque()  # with the generation each was read in
        self._bytes = 0
        self._lock = threading.Lock()  # the Kafka thread counts, the loop uncounts

    @property
    def refill_at(self) -> int:
        """Free room (in messages) at which the Kafka thread reads again."""
        return max(1, self.messages // 2)

    def byte_budget(self) -> int:
        """Bytes the Kafka thread may still read. (Read without the lock, as ``low``: asked for every record handed
        to every subscription, and the loop may uncount right after, lock or not.)"""
        return self.max_bytes - self._bytes

    def count(self, messages: Iterable[Message], size: int | None = None) -> None:
        """Called by the Kafka thread for the messages it read (``size``: their bytes, if summed already), before
        handing them to the loop."""
        if size is None:
            size = sum(m.size for m in messages)
        with self._lock:
            self._bytes += size

    def uncount(self, messages: Iterable[Message]) -> None:
        size = sum(m.size for m in messages)
        with self._lock:
            self._bytes -= size

    def add(self, messages: Iterable[Message], generation: int) -> None:
        self._queue.extend(zip(messages, itertools.repeat(generation)))

    def take(self) -> tuple[Message, int] | None:
        """The oldest buffered message and its generation (None when empty)."""
        if not self._queue:
            return None
        item = self._queue.popleft()
        with self._lock:  # uncount of one, without its generator: this runs for every message delivered
            self._bytes -= len(item[0].body)
        return item

    def low(self) -> bool:
        """Half empty, by messages and by bytes: time to wake the Kafka thread. (The count of bytes is read
        without the lock: the Kafka thread may change it right after, lock or not.)"""
        return len(self._queue) <= self.refill_at and self._bytes <= self.max_bytes // 2

    def drop_older_than(self, generation: int) -> None:
        """Drops what was read before a retransmission moved the group."""
        self._drop(lambda message, g: g < generation)

    def drop_partitions(self, partitions: Container[tuple[str, int]]) -> None:
        """Drops what was read of partitions revoked from this consumer."""
        self._drop(lambda message, _: (message.topic, message.partition) in partitions)

    def _drop(self, void: Callable[[Message, int], bool]) -> None:
        self.uncount(m for m, g in self._queue if void(m, g))
        self._queue = deque(item for item in self._queue if not void(*item))

    def clear(self) -> None:
        self.uncount(m for m, _ in self._queue)
        self._queue.clear()

    def __len__(self) -> int:
        return len(self._queue)

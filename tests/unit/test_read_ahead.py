"""The read-ahead buffer's bookkeeping: bytes counted from the read, taken in order, dropped by generation."""

from __future__ import annotations

from hermes.consumers.read_ahead import ReadAhead
from hermes.domain.message import Message


def message(offset: int, size: int = 100) -> Message:
    return Message("t", 0, offset, f"m{offset}", b"x" * size, 0)


def test_bytes_count_from_the_read_until_taken() -> None:
    buffer = ReadAhead(messages=4, max_bytes=1000)
    read = [message(0), message(1), message(2)]
    buffer.count(read)  # the Kafka thread's next read must already see them
    assert buffer.byte_budget() == 700
    buffer.add(read, generation=0)
    taken = buffer.take()
    assert taken is not None and taken[0].offset == 0 and taken[1] == 0
    assert buffer.byte_budget() == 800 and len(buffer) == 2


def test_low_when_half_empty_by_messages_and_by_bytes() -> None:
    buffer = ReadAhead(messages=4, max_bytes=1000)
    read = [message(i, size=150) for i in range(4)]
    buffer.count(read)
    buffer.add(read, generation=0)
    assert buffer.refill_at == 2 and not buffer.low()
    buffer.take()
    assert not buffer.low()  # 3 messages, 450 bytes
    buffer.take()
    assert buffer.low()  # 2 messages, 300 bytes
    big = [message(9, size=600)]
    buffer.count(big)
    buffer.add(big, generation=0)
    buffer.take()
    assert len(buffer) == 2 and not buffer.low()  # few messages, but 750 bytes


def test_dropping_older_generations_and_clearing_release_their_bytes() -> None:
    buffer = ReadAhead(messages=10, max_bytes=1000)
    old, new = [message(0), message(1)], [message(0)]
    for generation, read in ((0, old), (1, new)):
        buffer.count(read)
        buffer.add(read, generation)
    buffer.drop_older_than(1)
    assert len(buffer) == 1 and buffer.byte_budget() == 900
    buffer.clear()
    assert len(buffer) == 0 and buffer.byte_budget() == 1000 and buffer.take() is None


def test_revoked_partitions_are_dropped_with_their_bytes() -> None:
    buffer = ReadAhead(messages=4, max_bytes=1000)
    read = [message(0), Message("t", 1, 0, "other", b"x" * 100, 0), message(1)]
    buffer.count(read)
    buffer.add(read, generation=0)
    buffer.drop_partitions({("t", 0)})
    assert len(buffer) == 1 and buffer.byte_budget() == 900
    taken = buffer.take()
    assert taken is not None and taken[0].message_id == "other"

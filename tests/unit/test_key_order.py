"""Ordering by key's bookkeeping: a busy key holds its later messages back, in order; the end of its delivery
hands the key to the next one; dropping held messages (a retransmission, a revocation) frees their keys."""

from __future__ import annotations

from hermes.consumers.key_order import KeyOrder
from hermes.domain.message import Message


def message(key: str, offset: int, partition: int = 0) -> Message:
    return Message("t", partition, offset, f"m{offset}", b"{}", 0, key.encode())


def test_a_busy_key_holds_its_later_messages_in_order_and_others_go_on() -> None:
    order = KeyOrder()
    a0, a1, a2, b0 = message("a", 0), message("a", 1), message("a", 2), message("b", 3)
    assert not order.hold((a0, 0), b"a")  # a0 starts: "a" is busy
    assert order.hold((a1, 0), b"a") and order.hold((a2, 0), b"a")
    assert not order.hold((b0, 0), b"b")  # another key is not held
    assert order.ready() is None
    order.release(b"a")  # a0 delivered: a1's turn, "a" stays busy
    assert order.ready() == (a1, 0)
    assert order.hold((message("a", 4), 0), b"a")  # still behind a1 and a2
    order.release(b"a")
    assert order.ready() == (a2, 0)
    order.release(b"b")
    order.release(b"a")
    assert order.ready() is not None  # a4
    order.release(b"a")
    assert not order.hold((message("a", 5), 0), b"a"), "the key was free again"


def test_dropping_held_messages_frees_keys_whose_turn_had_come() -> None:
    order = KeyOrder()
    a0, a1, a2 = message("a", 0), message("a", 1), message("a", 2)
    c0, c1 = message("c", 0, partition=1), message("c", 1, partition=1)
    order.hold((a0, 0), b"a")
    order.hold((a1, 0), b"a")
    order.hold((a2, 1), b"a")  # read again after a retransmission
    order.hold((c0, 0), b"c")
    order.hold((c1, 0), b"c")
    order.release(b"c")  # c1's turn came: it holds "c"
    dropped = order.drop(lambda m, generation: generation < 1)  # the retransmission voids generation 0
    assert dropped == [a1, c1]
    assert not order.hold((message("c", 2, partition=1), 1), b"c"), "c1 was dropped: nothing holds c"
    order.release(b"a")  # a0's delivery (cancelled) ends: a2 of the new generation goes
    assert order.ready() == (a2, 1)
    revoked = order.drop(lambda m, _: m.partition == 1)
    assert revoked == [] and order.hold((message("c", 3, partition=1), 1), b"c"), "c2's delivery still runs"

"""The table of idempotency keys in C (hermes.frontend.key_index): its growth, expiry, collisions and keys in flight,
and a restart through the records of ``hermes.idempotency``."""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from hermes.domain.names import TopicName
from hermes.domain.topic import Topic
from hermes.errors import IdempotencyKeyReused
from hermes.frontend.idempotency import IdempotencyKeys
from hermes.frontend.key_index import IN_FLIGHT, REUSED, KeyIndex
from hermes.frontend.publishing import Answer, PublishResult

ID_1, ID_2 = "0f8fad5b-d9cb-469f-a165-70867728950e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"
HOUR_MS = 3_600_000


def named(hi: int, lo: int) -> bytes:
    """A key's digest whose slot is chosen by ``lo`` (its last 8 bytes, read in the machine's order)."""
    return struct.pack("=QQ", hi, lo)


def test_a_key_is_in_flight_then_answered_and_a_repeat_with_another_body_is_refused() -> None:
    index, key = KeyIndex(), named(1, 2)
    assert index.claim(key, 10) is None and len(index) == 1  # new: in flight from now
    assert index.claim(key, 10) == IN_FLIGHT
    assert index.claim(key, 11) == REUSED
    until = index.answered(key, 10, ID_1, True, HOUR_MS)
    assert abs(until - (time.time() * 1000 + HOUR_MS)) < 1000
    assert index.claim(key, 10) == (ID_1, True)
    assert index.claim(key, 11) == REUSED
    index.forget(key, 10)  # only a key in flight is forgotten when its publish fails
    assert key in index and len(index) == 1


def test_a_refused_first_publish_is_forgotten_unless_another_took_its_key() -> None:
    index, key = KeyIndex(), named(1, 2)
    index.claim(key, 10)
    index.forget(key, 11)  # another body's publish: not this one
    assert key in index
    index.forget(key, 10)
    assert key not in index and len(index) == 0
    assert index.claim(key, 11) is None  # published again


def test_the_table_doubles_when_half_full_and_keeps_every_key() -> None:
    index = KeyIndex()
    assert index.capacity == 1024
    keys = [named(n, random.getrandbits(64)) for n in range(1, 5001)]
    for n, key in enumerate(keys):
        index.claim(key, n)
    assert len(index) == 5000 and index.capacity == 16384  # 5000 > 8192 / 2
    assert all(index.claim(key, n) == IN_FLIGHT for n, key in enumerate(keys))


def test_keys_whose_slots_collide_are_each_found_and_deleting_one_keeps_the_others() -> None:
    """Keys of one home slot, at the table's end so that they wrap around to its start, and keys homed in the slots
    they spill into: deleting any of them moves the right ones back, leaving no hole that hides a key."""
    index = KeyIndex()
    last = index.capacity - 1
    same = [named(hi, last) for hi in range(1, 41)]  # one home: the last slot
    spilled = [named(1000 + n, n) for n in range(20)]  # homes at the start, where those wrap to
    for n, key in enumerate(same + spilled):
        index.claim(key, n)
    for gone in (same[0], same[17], spilled[3], same[39], spilled[0]):
        index.forget(gone, (same + spilled).index(gone))
        assert gone not in index
    left = [key for key in same + spilled if key not in (same[0], same[17], spilled[3], same[39], spilled[0])]
    assert len(index) == len(left) == 55
    assert all(key in index for key in left)
    assert all(index.claim(key, (same + spilled).index(key)) == IN_FLIGHT for key in left)


def test_a_key_whose_window_is_over_is_claimed_anew_and_swept_out() -> None:
    index = KeyIndex()
    now = int(time.time() * 1000)
    old, new = named(1, 5), named(2, 5)  # one home slot: the sweep moves the second back
    assert index.learn(old, 1, ID_1, True, now + 30)
    assert index.learn(new, 2, ID_2, False, now + HOUR_MS)
    time.sleep(0.05)
    assert index.claim(old, 9) is None  # its window is over: another body is a new publish
    index.answered(old, 9, ID_2, True, 20)
    time.sleep(0.05)
    assert index.expire(3) == 0  # the sweep goes on from slot 0: it has not reached slot 5
    assert index.expire(index.capacity) == 1
    assert old not in index and index.claim(new, 2) == (ID_2, False) and len(index) == 1


def test_the_table_grows_without_the_keys_whose_window_is_over() -> None:
    index = KeyIndex()
    now = int(time.time() * 1000)
    for n in range(1, 500):
        index.learn(named(n, random.getrandbits(64)), n, ID_1, True, now + 20)
    time.sleep(0.03)
    for n in range(1, 100):
        index.claim(named(10_000 + n, random.getrandbits(64)), n)
    assert len(index) == 99 and index.capacity == 1024  # emptied as it was grown, at the same size


def test_only_canonical_uuids_are_kept_as_message_ids() -> None:
    index = KeyIndex()
    until = int(time.time() * 1000) + HOUR_MS
    for message_id in (ID_1.upper(), ID_1.replace("-", ""), "x" * 36, ID_1[:-1] + "g", "é" * 36):
        assert index.learn(named(1, 1), 1, message_id, True, until) is False
    assert len(index) == 0
    index.claim(named(1, 1), 1)
    with pytest.raises(ValueError, match="UUID"):
        index.answered(named(1, 1), 1, "not-a-uuid", True, HOUR_MS)
    with pytest.raises(TypeError, match="16 bytes"):
        index.claim(b"short", 1)
    with pytest.raises(OverflowError):
        index.claim(named(1, 1), -1)


def test_the_table_behaves_as_a_dict_of_its_keys_under_random_operations() -> None:
    """Thousands of claims, answers, failures and sweeps on keys crowded into few home slots, checked against a
    model; windows are an hour, so that none is over during the test."""
    chooser, index = random.Random(34), KeyIndex()
    model: dict[bytes, tuple[int, tuple[str, bool] | None]] = {}  # a key: its body's digest, its answer
    keys = [named(n, chooser.randrange(64)) for n in range(1, 3001)]
    for _ in range(30_000):
        key = chooser.choice(keys)
        digest = chooser.randrange(3)
        operation = chooser.random()
        if operation < 0.5:
            known = model.get(key)
            expected = None if known is None else REUSED if known[0] != digest else known[1] or IN_FLIGHT
            assert index.claim(key, digest) == expected
            if known is None:
                model[key] = (digest, None)
        elif operation < 0.8 and key in model and model[key][1] is None:
            answer = (chooser.choice((ID_1, ID_2)), chooser.random() < 0.5)
            index.answered(key, model[key][0], *answer, HOUR_MS)
            model[key] = (model[key][0], answer)
        elif operation < 0.95:
            index.forget(key, digest)
            if key in model and model[key] == (digest, None):
                del model[key]
        else:
            assert index.expire(chooser.randrange(2000)) == 0
        assert len(index) == len(model)
    assert all((key in index) == (key in model) for key in keys)


class _Records:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def produce(self, topic: str, value: bytes, *_: Any, **__: Any) -> None:
        self.values.append(value)


def test_a_restarted_frontend_answers_the_keys_its_records_hold() -> None:
    """A frontend's keys written to hermes.idempotency (here: the values its producer was given) are what the next
    one learns at its start: a repeat is answered as the first was, another body is 422."""
    topic = Topic(TopicName.parse("g.t"))
    records = _Records()
    produced: list[Answer] = []

    def produce(topic: Topic, message_id: str, body: Any, headers: Mapping[str, str], answer: Answer) -> None:
        produced.append(answer)

    async def first_life() -> None:
        before = IdempotencyKeys(records, None, None)  # type: ignore[arg-type]  # only the producer is used
        for n in range(3):
            before.publish(produce, topic, str(n), b'{"n": %d}' % n, {}, f"k{n}", lambda _: None)
        produced[0](PublishResult(ID_1, True))
        produced[1](PublishResult(ID_2, False))
        produced[2](RuntimeError("refused"))  # never kept, never written
        await before.stop()  # writes what the 10 ms flush had not

    asyncio.run(first_life())
    assert [entry[0] for value in records.values for entry in orjson.loads(value)] == ["g.t/k0", "g.t/k1"]
    after = IdempotencyKeys(_Records(), None, None)  # type: ignore[arg-type]
    after._learn(records.values)
    answers: list[PublishResult | Exception] = []
    for n in range(3):
        after.publish(produce, topic, "new", b'{"n": %d}' % n, {}, f"k{n}", answers.append)
    assert answers == [PublishResult(ID_1, True, replayed=True), PublishResult(ID_2, False, replayed=True)]
    assert len(produced) == 4  # k2 published again
    with pytest.raises(IdempotencyKeyReused):
        after.publish(produce, topic, "new", b"{}", {}, "k0", answers.append)

"""The index of idempotency keys (pure logic, no broker: the records of keys go to a producer that keeps them)."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import tracemalloc
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
import pytest
import xxhash

from hermes.domain.names import TopicName
from hermes.domain.topic import Topic
from hermes.errors import IdempotencyKeyReused, ValidationError
from hermes.frontend.idempotency import IdempotencyKeys, _name_digest
from hermes.frontend.key_table import RECORD_MAGIC, KeyTable
from hermes.frontend.publishing import Answer, PublishResult
from tests.support.waiting import wait_until

BODY = b'{"order": 1}'
DIGEST = f"{xxhash.xxh3_64_intdigest(BODY):016x}"  # the body's XXH3-64, in hex
ID_1, ID_2 = "0f8fad5b-d9cb-469f-a165-70867728950e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"
TOPIC = Topic(TopicName.parse("g.t"))
# A window that ends soon, yet not before a busy machine has learnt its keys
SHORT_MS = 500


class Records:
    """The producer of the records of keys: keeps their values."""

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def produce(self, topic: str, value: bytes, *_: Any, **__: Any) -> None:
        self.values.append(value)


class Produced:
    """The publisher's own path: keeps the answer of each message it was given."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []

    def __call__(self, topic: Topic, message_id: str, body: Any, headers: Mapping[str, str], answer: Answer) -> None:
        self.answers.append(answer)


def keys(records: Records | None = None) -> IdempotencyKeys:
    return IdempotencyKeys(records or Records(), None, None)  # type: ignore[arg-type]


def record(*entries: list[Any]) -> bytes:
    return orjson.dumps(list(entries))


def test_a_learned_key_is_answered_with_its_first_publishs_id_and_status() -> None:
    index = keys()
    until = int(time.time() * 1000) + 60_000
    index._learn([record(["g.t/k1", DIGEST, 202, ID_1, until], ["g.t/k2", DIGEST, 201, ID_2, until])])
    answers: list[PublishResult | Exception] = []
    produced = Produced()
    index.publish(produced, TOPIC, ID_2, BODY, {}, "k1", answers.append)
    index.publish(produced, TOPIC, ID_2, BODY, {}, "k2", answers.append)
    assert answers == [PublishResult(ID_1, False, replayed=True), PublishResult(ID_2, True, replayed=True)]
    with pytest.raises(IdempotencyKeyReused):  # another body
        index.publish(produced, TOPIC, ID_2, BODY + b" ", {}, "k1", answers.append)
    assert produced.answers == []


def test_a_first_publish_is_kept_at_the_flush_and_answers_its_repeats_before_it() -> None:
    """Repeats while the first is in flight wait for its answer; those between its answer and the flush of keys
    (10 ms later) are answered as repeats too; the flush keeps it in the index and writes its record."""

    async def scenario() -> None:
        records = Records()
        index, produced = keys(records), Produced()
        answers: list[PublishResult | Exception] = []
        index.publish(produced, TOPIC, ID_1, BODY, {}, "k", answers.append)
        index.publish(produced, TOPIC, ID_2, BODY, {}, "k", answers.append)  # in flight: waits
        assert len(produced.answers) == 1 and answers == []
        answered_at = time.time() * 1000
        produced.answers[0](PublishResult(ID_1, True))
        assert answers == [PublishResult(ID_1, True, replayed=True), PublishResult(ID_1, True)]
        index.publish(produced, TOPIC, ID_2, BODY, {}, "k", answers.append)  # answered, not flushed yet
        assert answers[-1] == PublishResult(ID_1, True, replayed=True) and len(produced.answers) == 1
        with pytest.raises(IdempotencyKeyReused):
            index.publish(produced, TOPIC, ID_2, BODY + b" ", {}, "k", answers.append)
        assert records.values == []
        await asyncio.sleep(0.05)  # the 10 ms flush
        [value] = records.values
        assert value.startswith(RECORD_MAGIC)
        follower = keys()
        follower._learn([value])
        digest, message_id, acknowledged, until = follower._table.find(_name_digest("g.t", "k")) or (0, "", False, 0)
        assert (digest, message_id, acknowledged) == (xxhash.xxh3_64_intdigest(BODY), ID_1, True)
        assert until >= answered_at + TOPIC.idempotency_window.seconds * 1000  # late, never early
        assert "g.t/k" in index
        index.publish(produced, TOPIC, ID_2, BODY, {}, "k", answers.append)  # from the index
        assert answers[-1] == PublishResult(ID_1, True, replayed=True) and len(produced.answers) == 1
        other = Topic(TopicName.parse("g.other"))  # the key is the topic's
        index.publish(produced, other, ID_2, BODY, {}, "k", answers.append)
        assert len(produced.answers) == 2

    asyncio.run(scenario())


def test_a_first_publish_that_failed_is_forgotten_and_its_waiting_repeats_get_the_error() -> None:
    async def scenario() -> None:
        index, produced = keys(), Produced()
        answers: list[PublishResult | Exception] = []
        index.publish(produced, TOPIC, ID_1, BODY, {}, "k", answers.append)
        index.publish(produced, TOPIC, ID_2, BODY, {}, "k", answers.append)
        failure = RuntimeError("the broker refused it")
        produced.answers[0](failure)
        assert answers == [failure, failure] and "g.t/k" not in index
        index.publish(produced, TOPIC, ID_2, BODY, {}, "k", answers.append)  # published again
        assert len(produced.answers) == 2

    asyncio.run(scenario())


def test_a_produce_that_raises_answers_the_publish_with_its_error() -> None:
    index = keys()
    answers: list[PublishResult | Exception] = []
    failure = RuntimeError("refused at once")

    def refusing(*_: Any) -> None:
        raise failure

    index.publish(refusing, TOPIC, ID_1, BODY, {}, "k", answers.append)
    assert answers == [failure] and len(index) == 0


def test_keys_are_forgotten_once_their_window_is_over() -> None:
    index = keys()
    now = int(time.time() * 1000)
    index._learn([record(["g.t/old", DIGEST, 201, ID_1, now + SHORT_MS], ["g.t/new", DIGEST, 201, ID_2, now + 60_000])])
    assert "g.t/old" in index and "g.t/new" in index
    # answered as unknown once the window is over (by the kernel's coarse clock: a tick or so late, never early)
    wait_until(lambda: "g.t/old" not in index)
    assert time.time() * 1000 > now + SHORT_MS
    assert "g.t/new" in index and len(index) == 2
    index._table.sweep(index._table.capacity)  # and its slot emptied by the sweep
    assert len(index) == 1


def test_entries_this_code_did_not_write_are_ignored() -> None:
    index = keys()
    until = int(time.time() * 1000) + 60_000
    index._learn(
        [
            record(
                ["g.t/short-digest", DIGEST[:8], 201, ID_1, until],
                ["g.t/sha-256", DIGEST * 2, 201, ID_1, until],  # an older version's digest: not comparable
                ["g.t/no-uuid", DIGEST, 201, "x" * 36, until],
                ["g.t/upper-case", DIGEST, 201, ID_1.upper(), until],
                ["g.t/status", DIGEST, 500, ID_1, until],
                ["g.t/far", DIGEST, 201, ID_1, 10**13],
            ),
            b"not json",
        ]
    )
    assert len(index) == 0


def test_the_table_holds_no_python_object_per_key() -> None:
    index = keys()
    held = len(gc.get_referents(index._table))  # its hooks
    until = int(time.time() * 1000) + 60_000
    index._learn([record(*([f"g.t/k{n}", DIGEST, 201, ID_1, until] for n in range(100)))])
    assert len(index) == 100
    assert len(gc.get_referents(index._table)) == held


def test_a_key_costs_less_than_200_bytes() -> None:
    """The index's ints and arrays; the strings and tuples of a key cost 330 (tracemalloc; 345 by RSS over a
    million keys, 179 now)."""
    index = keys()
    until = int(time.time() * 1000) + 60_000
    records = [  # 20,000 keys
        record(*([f"g.t/{uuid.uuid4()}", DIGEST, 201, str(uuid.uuid4()), until] for _ in range(1000)))
        for _ in range(20)
    ]
    tracemalloc.start()
    try:
        index._learn(records)
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(index) == 20_000
    assert used / 20_000 < 200, used / 20_000


def test_keys_answered_before_the_flush_keep_no_object_of_their_own_for_the_collector() -> None:
    """A key's first publish is answered through an object the collector does not track, and the keys answered
    until the 10 ms flush wait as the table's own slots: a tuple (and its outcome) per key lived through the
    collector's young generations, 0.3 µs more of collections per keyed publish in a frontend."""

    async def scenario() -> None:
        index, produced = keys(), Produced()
        held = len(gc.get_referents(index._table))
        for n in range(100):
            index.publish(produced, TOPIC, ID_1, BODY, {}, f"k{n}", lambda _: None)
        assert not any(gc.is_tracked(first) for first in produced.answers)
        for n, first in enumerate(produced.answers):
            first(PublishResult(str(uuid.UUID(int=n)), True))
        assert len(gc.get_referents(index._table)) == held + 1  # the topic's settings, shared by all

    asyncio.run(scenario())


def test_a_flush_writes_one_record_that_another_frontend_learns() -> None:
    """The keys of one flush, of every topic, are written in one record; another index learns them from it."""

    async def scenario() -> None:
        records = Records()
        index, produced = keys(records), Produced()
        other = Topic(TopicName.parse("g.other"))
        for n, topic in enumerate((TOPIC, other, TOPIC)):
            index.publish(produced, topic, ID_1, BODY, {}, f"k{n}", lambda _: None)
        outcomes = (PublishResult(ID_1, True), PublishResult(ID_2, False), PublishResult(ID_2, True))
        for first, outcome in zip(produced.answers, outcomes, strict=True):
            first(outcome)
        await asyncio.sleep(0.05)  # the 10 ms flush
        assert len(records.values) == 1
        follower, answers = keys(), []
        follower._learn(records.values)
        for n, topic in enumerate((TOPIC, other, TOPIC)):
            follower.publish(Produced(), topic, ID_1, BODY, {}, f"k{n}", answers.append)
        assert answers == [
            PublishResult(ID_1, True, replayed=True),
            PublishResult(ID_2, False, replayed=True),
            PublishResult(ID_2, True, replayed=True),
        ]
        follower._table.sweep(follower._table.capacity)  # their windows are a day: kept
        assert len(follower) == 3

    asyncio.run(scenario())


def test_a_record_of_columns_with_bad_fields_is_ignored_key_by_key() -> None:
    index = keys()
    until = int(time.time() * 1000) + 60_000
    good = {"topic": "g.t", "until": until, "keys": ["a", "b", "c", "d"], "ids": [ID_1, "x" * 36, ID_1, ID_2]}
    index._learn(
        [
            orjson.dumps({**good, "digests": [1, 2, -3, "4"], "acknowledged": [True, True, True, False]}),
            orjson.dumps({**good, "digests": [1, 2, 3, 4], "acknowledged": [True, 1, 0, "yes"]}),
            orjson.dumps({**good, "until": 10**13, "digests": [1, 2, 3, 4], "acknowledged": [True] * 4}),
            orjson.dumps({"topic": "g.t", "until": until}),
        ]
    )
    assert len(index) == 1 and "g.t/a" in index


def test_thousands_of_first_publishes_are_all_kept_as_the_table_grows() -> None:
    """More keys than the table's first capacity, each answered: every one is known afterwards, and a sweep of the
    whole table (which empties the slots of windows over) keeps them all."""

    async def scenario() -> None:
        index, produced = keys(), Produced()
        capacity = index._table.capacity
        names = [f"k{n}" for n in range(3 * capacity)]
        for name in names:
            index.publish(produced, TOPIC, ID_1, BODY, {}, name, lambda _: None)
        for n, first in enumerate(produced.answers):
            first(PublishResult(str(uuid.UUID(int=n + 1)), n % 2 == 0))
        index._table.sweep(index._table.capacity)
        assert index._table.capacity > capacity and len(index) == len(names)
        answers: list[PublishResult | Exception] = []
        for name in names:
            index.publish(produced, TOPIC, ID_2, BODY, {}, name, answers.append)
        assert answers == [PublishResult(str(uuid.UUID(int=n + 1)), n % 2 == 0, True) for n in range(len(names))]
        assert len(produced.answers) == len(names)  # none published again

    asyncio.run(scenario())


@pytest.mark.parametrize("key", ["", "k" * 256, "tab\there", "new\nline", "\x7f"])
def test_a_key_that_is_no_key_is_refused_naming_the_header(key: str) -> None:
    with pytest.raises(ValidationError) as refused:
        keys().publish(Produced(), TOPIC, ID_1, BODY, {}, key, lambda _: None)
    assert refused.value.field == "Idempotency-Key"


def test_a_key_of_printable_characters_beyond_ascii_is_a_key() -> None:
    async def scenario() -> None:
        index, produced = keys(), Produced()
        answers: list[PublishResult | Exception] = []
        for _ in range(2):
            index.publish(produced, TOPIC, ID_1, BODY, {}, "zamówienie-ß-東京", answers.append)
        produced.answers[0](PublishResult(ID_1, True))
        assert len(produced.answers) == 1 and answers[0] == PublishResult(ID_1, True, replayed=True)
        assert "g.t/zamówienie-ß-東京" in index

    asyncio.run(scenario())


def test_a_first_publish_holds_its_answer_only_until_it_is_answered() -> None:
    """The table's C code takes and lets go of what a publish hands it: a reference kept would leak a request's
    objects per keyed publish."""

    async def scenario() -> None:
        index, produced = keys(), Produced()
        answers: list[PublishResult | Exception] = []
        answer = answers.append
        before = sys.getrefcount(answer)
        for n in range(100):
            index.publish(produced, TOPIC, ID_1, BODY, {}, f"k{n}", answer)
        assert sys.getrefcount(answer) == before + 100  # each first publish, until answered
        for n, first in enumerate(produced.answers):
            first(PublishResult(str(uuid.UUID(int=n + 1)), True))
            first(PublishResult(ID_2, True))  # a second answer is none
        assert sys.getrefcount(answer) == before and len(answers) == 100
        for n in range(100):  # repeats, answered at once
            index.publish(produced, TOPIC, ID_2, BODY, {}, f"k{n}", answer)
        assert sys.getrefcount(answer) == before and len(answers) == 200

    asyncio.run(scenario())


def test_a_record_of_this_format_that_is_cut_short_is_ignored() -> None:
    index = keys()
    index._learn([RECORD_MAGIC + b"\x01" * 47, RECORD_MAGIC[:4]])
    assert len(index) == 0


def test_a_sweep_empties_the_slots_of_windows_over_and_every_other_key_is_still_found() -> None:
    """Keys of short and long windows mixed in one table: emptying the short ones moves slots back along their
    probe runs, and none of the long ones may be lost by that."""
    index = keys()
    now = int(time.time() * 1000)
    short = [(_name_digest("g.t", f"s{n}"), 1, ID_1, True, now + SHORT_MS) for n in range(3000)]
    long = [(_name_digest("g.t", f"l{n}"), 2, ID_2, False, now + 60_000) for n in range(3000)]
    mixed = [key for pair in zip(short, long, strict=True) for key in pair]
    index._table.learn(KeyTable.record(mixed))
    assert len(index) == 6000
    wait_until(lambda: index._table.find(short[0][0]) is None)  # the window over, by the table's clock
    index._table.sweep(index._table.capacity)
    assert len(index) == 3000
    assert all(index._table.find(named) == (2, ID_2, False, now + 60_000) for named, *_ in long)
    assert not any(index._table.find(named) for named, *_ in short)

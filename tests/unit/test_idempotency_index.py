"""The index of idempotency keys (pure logic, no broker: only ``_flush`` produces, and it is not reached here)."""

from __future__ import annotations

import gc
import time
import tracemalloc
import uuid
from typing import Any

import orjson
import pytest

from hermes.domain.names import TopicName
from hermes.domain.topic import Topic
from hermes.errors import IdempotencyKeyReused
from hermes.frontend.idempotency import IdempotencyKeys
from hermes.frontend.publishing import PublishResult

DIGEST = "0123456789abcdef"  # the body's XXH3-64, in hex
ID_1, ID_2 = "0f8fad5b-d9cb-469f-a165-70867728950e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"


def keys() -> IdempotencyKeys:
    return IdempotencyKeys(None, None, None)  # type: ignore[arg-type]


def record(*entries: list[Any]) -> bytes:
    return orjson.dumps(list(entries))


def test_a_learned_key_is_answered_with_its_first_publishs_id_and_status() -> None:
    index = keys()
    until = int(time.time() * 1000) + 60_000
    index._learn([record(["g.t/k1", DIGEST, 202, ID_1, until], ["g.t/k2", DIGEST, 201, ID_2, until])])
    answers: list[PublishResult | Exception] = []
    topic = Topic(TopicName.parse("g.t"))
    assert index._admit(topic, "k1", int(DIGEST, 16), answers.append) is None
    assert index._admit(topic, "k2", int(DIGEST, 16), answers.append) is None
    assert answers == [PublishResult(ID_1, False, replayed=True), PublishResult(ID_2, True, replayed=True)]
    with pytest.raises(IdempotencyKeyReused):  # another body
        index._admit(topic, "k1", int(DIGEST, 16) + 1, answers.append)


def test_keys_are_forgotten_once_their_window_is_over() -> None:
    index = keys()
    now = int(time.time() * 1000)
    index._learn([record(["g.t/old", DIGEST, 201, ID_1, now + 50], ["g.t/new", DIGEST, 201, ID_2, now + 60_000])])
    assert "g.t/old" in index and "g.t/new" in index
    time.sleep(0.06)
    index._forget_expired()
    assert "g.t/old" not in index and "g.t/new" in index


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


def test_the_index_is_no_container_the_garbage_collector_walks() -> None:
    index = keys()
    until = int(time.time() * 1000) + 60_000
    index._learn([record(*([f"g.t/k{n}", DIGEST, 201, ID_1, until] for n in range(100)))])
    assert len(index) == 100
    assert not gc.is_tracked(index._index)


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

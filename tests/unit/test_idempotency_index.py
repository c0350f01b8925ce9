"""The index of idempotency keys (pure logic, no broker: only ``_flush`` produces, and it is not reached here)."""

from __future__ import annotations

import gc
import time
from typing import Any

import orjson

from hermes.domain.names import TopicName
from hermes.domain.topic import Topic
from hermes.frontend.idempotency import IdempotencyKeys
from hermes.frontend.publishing import PublishResult

DIGEST = "0123456789abcdef0123456789abcdef"


def keys() -> IdempotencyKeys:
    return IdempotencyKeys(None, None, None)  # type: ignore[arg-type]


def record(*entries: list[Any]) -> bytes:
    return orjson.dumps(list(entries))


def test_a_learned_key_is_answered_with_its_first_publishs_id_and_status() -> None:
    index = keys()
    until = int(time.time() * 1000) + 60_000
    index._learn([record(["g.t/k1", DIGEST, 202, "id-1", until], ["g.t/k2", DIGEST, 201, "id-22", until])])
    answers: list[PublishResult | Exception] = []
    topic = Topic(TopicName.parse("g.t"))
    assert index._admit(topic, "k1", DIGEST, answers.append) is None
    assert index._admit(topic, "k2", DIGEST, answers.append) is None
    assert answers == [PublishResult("id-1", False, replayed=True), PublishResult("id-22", True, replayed=True)]


def test_keys_are_forgotten_once_their_window_is_over() -> None:
    index = keys()
    now = int(time.time() * 1000)
    index._learn([record(["g.t/old", DIGEST, 201, "a", now + 50], ["g.t/new", DIGEST, 201, "b", now + 60_000])])
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
                ["g.t/short-digest", DIGEST[:8], 201, "a", until],
                ["g.t/long-id", DIGEST, 201, "x" * 1000, until],
                ["g.t/status", DIGEST, 500, "a", until],
                ["g.t/far", DIGEST, 201, "a", 10**13],
            ),
            b"not json",
        ]
    )
    assert len(index) == 0


def test_the_index_is_no_container_the_garbage_collector_walks() -> None:
    index = keys()
    until = int(time.time() * 1000) + 60_000
    index._learn([record(*([f"g.t/k{n}", DIGEST, 201, f"id-{n}", until] for n in range(100)))])
    assert len(index) == 100
    assert not gc.is_tracked(index._index)

"""Management's last answers of the metadata store, answered again while the store is unreachable."""

from __future__ import annotations

import asyncio

import pytest

from hermes.errors import MetadataUnreachable, TopicNotFound
from hermes.management.metadata_age import LastReads


async def answer(value: str) -> str:
    return value


async def deleted() -> str:
    raise TopicNotFound("Topic g.t not found")


async def unreachable() -> str:
    raise MetadataUnreachable("ZooKeeper is unreachable", retry_after=1.0)


def test_an_unreachable_store_gets_the_last_answer_of_the_same_read_and_nothing_else() -> None:
    async def scenario() -> None:
        reads = LastReads(kept=2)
        assert await reads.read("a", lambda: answer("a1")) == "a1"
        assert await reads.read("a", lambda: answer("a2")) == "a2"
        assert await reads.read("a", unreachable) == "a2"
        with pytest.raises(MetadataUnreachable):
            await reads.read("never", unreachable)

    asyncio.run(scenario())


def test_the_least_recently_read_answer_goes_first_beyond_what_is_kept() -> None:
    async def scenario() -> None:
        reads = LastReads(kept=2)
        for key in ("a", "b"):
            await reads.read(key, lambda key=key: answer(key))
        await reads.read("a", lambda: answer("a"))  # read again: b is now the least recent
        await reads.read("c", lambda: answer("c"))
        assert await reads.read("a", unreachable) == "a"
        assert await reads.read("c", unreachable) == "c"
        with pytest.raises(MetadataUnreachable):
            await reads.read("b", unreachable)

    asyncio.run(scenario())


def test_a_read_the_store_refused_since_is_not_answered_from_before() -> None:
    async def scenario() -> None:
        reads = LastReads()
        await reads.read("topic", lambda: answer("there"))
        with pytest.raises(TopicNotFound):
            await reads.read("topic", deleted)
        with pytest.raises(MetadataUnreachable):
            await reads.read("topic", unreachable)

    asyncio.run(scenario())

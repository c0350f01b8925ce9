"""Work that waits for an unreachable metadata store instead of failing (``until_reachable``)."""

from __future__ import annotations

import asyncio

import pytest

from hermes.errors import MetadataUnreachable, TopicNotFound
from hermes.metadata.repository import until_reachable


def test_a_call_is_made_again_while_the_store_is_unreachable_and_other_errors_are_raised() -> None:
    calls: list[str] = []

    def away_twice(key: str) -> str:
        calls.append(key)
        if len(calls) <= 2:
            raise MetadataUnreachable("ZooKeeper is unreachable", retry_after=1.0)
        return f"{key}!"

    def gone(key: str) -> str:
        raise TopicNotFound(f"Topic {key} not found")

    assert asyncio.run(until_reachable(away_twice, "schema")) == "schema!"
    assert calls == ["schema"] * 3
    with pytest.raises(TopicNotFound):
        asyncio.run(until_reachable(gone, "g.t"))

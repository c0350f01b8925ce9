"""A starting cache waits out a metadata store that drops for a moment, within a bound."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hermes.domain.names import TopicName
from hermes.domain.topic import Topic
from hermes.errors import MetadataUnreachable
from hermes.metadata import cache
from hermes.metadata.cache import MetadataCache

pytestmark = pytest.mark.unit


class FlakyStore:
    """Answers each call after ``drops`` of its first calls found the store unreachable."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.calls: list[str] = []

    def _call(self, name: str, value: Any) -> Any:
        self.calls.append(name)
        if self.calls.count(name) <= self.drops:
            raise MetadataUnreachable("ZooKeeper is unreachable", retry_after=1.0)
        return value

    def watch(self, listener: Any) -> Any:
        return self._call("watch", lambda: None)

    def list_topics(self) -> list[Topic]:
        return self._call("list_topics", [Topic(TopicName("g", "t"))])  # type: ignore[no-any-return]

    def list_subscriptions(self) -> list[Any]:
        return self._call("list_subscriptions", [])  # type: ignore[no-any-return]

    def list_oauth_providers(self) -> list[Any]:
        return self._call("list_oauth_providers", [])  # type: ignore[no-any-return]


def test_a_start_asks_again_while_the_store_drops_for_a_moment() -> None:
    store = FlakyStore(drops=2)
    started = MetadataCache(store)  # type: ignore[arg-type]

    async def scenario() -> None:
        await started.start()
        await started.stop()

    asyncio.run(scenario())
    assert list(started.topics) == ["g.t"]
    assert store.calls.count("watch") == 3 and store.calls.count("list_topics") == 3


def test_a_start_fails_once_the_store_stayed_unreachable_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "START_WAIT", 0.3)
    started = MetadataCache(FlakyStore(drops=1_000))  # type: ignore[arg-type]
    with pytest.raises(MetadataUnreachable):
        asyncio.run(started.start())

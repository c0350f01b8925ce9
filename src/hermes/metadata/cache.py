"""An in-memory view of topics, subscriptions and OAuth providers kept fresh by the repository's change notifications.

Request paths (publishing, delivery) read this cache and never the metadata store. Listeners run on the
asyncio loop that started the cache, one change after another in the order they happened.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from hermes.domain.names import TopicName
from hermes.domain.oauth import OAuthProvider
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Topic
from hermes.errors import MetadataUnreachable, NotFoundError, StoredEntityInvalid
from hermes.metadata.repository import (
    ChangeAction,
    ChangeKind,
    MetadataChange,
    MetadataRepository,
    Unwatch,
    until_reachable,
)

log = logging.getLogger(__name__)
START_WAIT = 30.0  # seconds a starting cache waits for an unreachable store before the start fails
_START_RETRY = 0.2
T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

SubscriptionListener = Callable[[TopicName, str, Subscription | None], Awaitable[None]]
DocumentListener = Callable[[str], Awaitable[None]]


class MetadataCache:
    def __init__(self, repository: MetadataRepository) -> None:
        self._repository = repository
        self.topics: dict[str, Topic] = {}
        self.subscriptions: dict[tuple[str, str], Subscription] = {}
        self.oauth_providers: dict[str, OAuthProvider] = {}
        self._provider_listeners: list[Callable[[str], None]] = []
        self._subscription_listeners: list[SubscriptionListener] = []
        self._schema_listeners: list[Callable[[str], None]] = []
        self._topic_listeners: list[Callable[[str, Topic | None], None]] = []
        self._document_listeners: dict[str, list[DocumentListener]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unwatch: Unwatch | None = None
        self._changes: asyncio.Queue[MetadataChange] | None = None
        self._applier: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._changes = asyncio.Queue()
        # the watch before the load: no change falls in between
        self._unwatch = await _at_start(self._repository.watch, self._on_change)
        topics = await _at_start(self._repository.list_topics)
        subscriptions = await _at_start(self._repository.list_subscriptions)
        self.topics = {t.qualified_name: t for t in topics}
        self.subscriptions = {(s.topic_name.qualified, s.name): s for s in subscriptions}
        providers = await _at_start(self._repository.list_oauth_providers)
        self.oauth_providers = {p.name: p for p in providers}
        self._applier = asyncio.create_task(self._apply_changes(), name="metadata-cache")

    async def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
        if self._applier is not None:
            self._applier.cancel()
            await asyncio.gather(self._applier, return_exceptions=True)

    def on_topic_change(self, listener: Callable[[str, Topic | None], None]) -> None:
        """``listener(name, topic)`` after a topic was created or changed, with None after it was deleted."""
        self._topic_listeners.append(listener)

    def on_subscription_change(self, listener: SubscriptionListener) -> None:
        self._subscription_listeners.append(listener)

    def on_schema_change(self, listener: Callable[[str], None]) -> None:
        """``listener(qualified topic name)`` runs when a topic gets a new schema version."""
        self._schema_listeners.append(listener)

    def on_oauth_provider_change(self, listener: Callable[[str], None]) -> None:
        """``listener(provider name)`` runs after a provider was created, updated or deleted."""
        self._provider_listeners.append(listener)

    def on_document_change(self, namespace: str, listener: DocumentListener) -> None:
        """``await listener(key)`` after a document of ``namespace`` was written or deleted (documents are not
        cached: the listener reads what it needs)."""
        self._document_listeners.setdefault(namespace, []).append(listener)

    def topic(self, qualified_name: str) -> Topic | None:
        return self.topics.get(qualified_name)

    async def refresh_topic(self, qualified_name: str) -> Topic | None:
        """Re-reads one topic now (e.g. on a cache miss, to close the window before a notification); raises
        ``MetadataUnreachable`` while the store is."""
        self._keep_topic(qualified_name, await _read(self._repository.get_topic, TopicName.parse(qualified_name)))
        return self.topics.get(qualified_name)

    def _on_change(self, change: MetadataChange) -> None:  # repository watcher thread
        if self._loop is not None and self._changes is not None:
            self._loop.call_soon_threadsafe(self._changes.put_nowait, change)

    async def _apply_changes(self) -> None:
        assert self._changes is not None
        while True:
            change = await self._changes.get()
            try:
                if change.kind is ChangeKind.TOPIC:
                    await self._reload_topic(change.key)
                elif change.kind is ChangeKind.SCHEMA:
                    for schema_listener in self._schema_listeners:
                        schema_listener(change.key)
                elif change.kind is ChangeKind.SUBSCRIPTION:
                    topic, _, name = change.key.partition("/")
                    await self._reload_subscription(topic, name, change.action)
                elif change.kind is ChangeKind.OAUTH_PROVIDER:
                    await self._reload_provider(change.key)
                elif change.kind is ChangeKind.DOCUMENT:
                    namespace, _, key = change.key.partition("/")
                    for document_listener in self._document_listeners.get(namespace, ()):
                        await document_listener(key)
            except Exception:
                log.exception("applying metadata change %s failed", change)

    async def _reload_topic(self, qualified_name: str) -> None:
        topic = await _read_when_reachable(self._repository.get_topic, TopicName.parse(qualified_name))
        self._keep_topic(qualified_name, topic)

    def _keep_topic(self, qualified_name: str, topic: Topic | None) -> None:
        _keep(self.topics, qualified_name, topic)
        for listener in self._topic_listeners:
            listener(qualified_name, topic)

    async def _reload_provider(self, name: str) -> None:
        _keep(self.oauth_providers, name, await _read_when_reachable(self._repository.get_oauth_provider, name))
        for listener in self._provider_listeners:
            listener(name)

    async def _reload_subscription(self, topic: str, name: str, action: ChangeAction) -> None:
        topic_name = TopicName.parse(topic)
        sub = None
        if action is not ChangeAction.DELETED:
            sub = await _read_when_reachable(self._repository.get_subscription, topic_name, name)
        _keep(self.subscriptions, (topic, name), sub)
        for listener in self._subscription_listeners:
            await listener(topic_name, name, sub)


async def _at_start(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` in a thread, again while the store is unreachable, for at most ``START_WAIT`` seconds: a
    connection that drops for a moment as a process starts (a late ping on a busy machine) must not end it."""
    deadline = time.monotonic() + START_WAIT
    while True:
        try:
            return await asyncio.to_thread(call, *args)
        except MetadataUnreachable:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(_START_RETRY)


async def _read(read: Callable[..., T], *key: Any) -> T | None:
    """What the store holds now; None when it is gone, or fails validation (served by nobody: ``stored.py``)."""
    try:
        return await asyncio.to_thread(read, *key)
    except (NotFoundError, StoredEntityInvalid):
        return None


async def _read_when_reachable(read: Callable[..., T], *key: Any) -> T | None:
    """``_read``, waiting for an unreachable store: a change is applied once it is back, before any later one."""
    try:
        return await until_reachable(read, *key)
    except (NotFoundError, StoredEntityInvalid):
        return None


def _keep(cached: dict[K, T], key: K, value: T | None) -> None:
    if value is None:
        cached.pop(key, None)
    else:
        cached[key] = value

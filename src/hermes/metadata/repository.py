"""The metadata repository interface shared by the SQLite and ZooKeeper implementations.

Methods are synchronous (both back ends are blocking clients); async callers wrap them in
``asyncio.to_thread``. Listeners registered with ``watch`` are told of every change, from any process
sharing the store, within about a second, on a background thread.

Besides the Hermes entities, the repository keeps small JSON *documents* in named namespaces: operational
records such as the last undelivered message, retransmission requests or offline retransmission tasks (every
namespace, its writer and readers: :mod:`hermes.metadata.documents`). They survive restarts and are shared by
every process.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from hermes.domain.names import TopicName
from hermes.domain.oauth import OAuthProvider
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Group, Topic
from hermes.errors import MetadataUnreachable, StoredEntityInvalid

T = TypeVar("T")

_UNREACHABLE_RETRY = 0.5  # seconds between calls while the store is unreachable


class ChangeKind(StrEnum):
    GROUP = "group"
    TOPIC = "topic"
    SUBSCRIPTION = "subscription"
    OAUTH_PROVIDER = "oauth_provider"
    SCHEMA = "schema"
    DOCUMENT = "document"


class ChangeAction(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"


@dataclass(frozen=True)
class MetadataChange:
    """Something changed. ``key`` is the group name, the qualified topic name, ``topic/subscription``,
    the provider name, or ``namespace/key`` for documents. Listeners re-read what they need."""

    kind: ChangeKind
    action: ChangeAction
    key: str


Listener = Callable[[MetadataChange], None]
Repair = Callable[[dict[str, Any]], T]
Unwatch = Callable[[], None]


def now_ms() -> int:
    return int(time.time() * 1000)


def subscription_key(topic: TopicName, name: str) -> str:
    return f"{topic.qualified}/{name}"


async def until_reachable(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` in a thread, again every half second while the store is unreachable (``MetadataUnreachable``):
    for work that must wait for the store rather than fail, e.g. applying a change or reading the schema a delivery
    needs. A request's answer must not wait: it calls the store and answers 503."""
    while True:
        try:
            return await asyncio.to_thread(call, *args)
        except MetadataUnreachable:
            await asyncio.sleep(_UNREACHABLE_RETRY)


class MetadataRepository(ABC):
    # --- groups ---
    @abstractmethod
    def create_group(self, group: Group) -> Group: ...

    @abstractmethod
    def get_group(self, name: str) -> Group: ...

    @abstractmethod
    def list_groups(self) -> list[Group]: ...

    @abstractmethod
    def delete_group(self, name: str) -> None:
        """Raises GroupNotEmpty while the group has topics."""

    # --- topics ---
    @abstractmethod
    def create_topic(self, topic: Topic) -> Topic:
        """Stamps createdAt/modifiedAt. Raises GroupNotFound, TopicAlreadyExists."""

    @abstractmethod
    def get_topic(self, name: TopicName) -> Topic:
        """Raises TopicNotFound, or StoredEntityInvalid for one that fails today's validation (``stored.py``)."""

    @abstractmethod
    def stored_topics(self, group: str | None = None) -> list[Topic | StoredEntityInvalid]:
        """Every stored topic, by name: those that fail today's validation as StoredEntityInvalid."""

    def list_topics(self, group: str | None = None) -> list[Topic]:
        """The topics Hermes serves: ``stored_topics`` but those that fail validation."""
        return [t for t in self.stored_topics(group) if isinstance(t, Topic)]

    @abstractmethod
    def update_topic(
        self, name: TopicName, change: Callable[[Topic], Topic], repair: Repair[Topic] | None = None
    ) -> Topic:
        """Applies ``change`` to the current topic atomically (retrying on concurrent updates); a stored one that
        fails validation is replaced by ``repair(its stored JSON)``, or raises StoredEntityInvalid."""

    @abstractmethod
    def delete_topic(self, name: TopicName) -> None:
        """Raises TopicNotEmpty while the topic has subscriptions. Removes its schemas."""

    # --- Avro schemas, versioned per topic ---
    @abstractmethod
    def save_schema(self, topic: TopicName, schema: str) -> int:
        """Stores a new version and returns its number (1, 2, ...)."""

    @abstractmethod
    def get_schema(self, topic: TopicName, version: int | None = None) -> tuple[int, str]:
        """The given version, or the latest. Raises SchemaNotFound."""

    @abstractmethod
    def list_schema_versions(self, topic: TopicName) -> list[int]: ...

    # --- subscriptions ---
    @abstractmethod
    def create_subscription(self, subscription: Subscription) -> Subscription:
        """Raises TopicNotFound, SubscriptionAlreadyExists."""

    @abstractmethod
    def get_subscription(self, topic: TopicName, name: str) -> Subscription:
        """Raises SubscriptionNotFound, or StoredEntityInvalid for one that fails today's validation."""

    @abstractmethod
    def stored_subscriptions(self, topic: TopicName | None = None) -> list[Subscription | StoredEntityInvalid]:
        """Every stored subscription, by topic and name: those that fail validation as StoredEntityInvalid."""

    def list_subscriptions(self, topic: TopicName | None = None) -> list[Subscription]:
        """The subscriptions Hermes serves: ``stored_subscriptions`` but those that fail validation."""
        return [s for s in self.stored_subscriptions(topic) if isinstance(s, Subscription)]

    @abstractmethod
    def update_subscription(
        self,
        topic: TopicName,
        name: str,
        change: Callable[[Subscription], Subscription],
        repair: Repair[Subscription] | None = None,
    ) -> Subscription:
        """Applies ``change`` atomically: two concurrent updates never lose one another. A stored one that fails
        validation is replaced by ``repair(its stored JSON, secrets unsealed)``, or raises StoredEntityInvalid."""

    @abstractmethod
    def delete_subscription(self, topic: TopicName, name: str) -> None: ...

    # --- OAuth providers ---
    @abstractmethod
    def create_oauth_provider(self, provider: OAuthProvider) -> OAuthProvider: ...

    @abstractmethod
    def get_oauth_provider(self, name: str) -> OAuthProvider: ...

    @abstractmethod
    def list_oauth_providers(self) -> list[OAuthProvider]: ...

    @abstractmethod
    def update_oauth_provider(self, name: str, change: Callable[[OAuthProvider], OAuthProvider]) -> OAuthProvider: ...

    @abstractmethod
    def delete_oauth_provider(self, name: str) -> None: ...

    # --- operational documents ---
    @abstractmethod
    def put_document(self, namespace: str, key: str, document: dict[str, Any]) -> None: ...

    def put_documents(self, namespace: str, documents: dict[str, dict[str, Any]]) -> None:
        """``put_document`` of each of ``documents`` (by key); a store may write them all at once."""
        for key, document in documents.items():
            self.put_document(namespace, key, document)

    @abstractmethod
    def get_document(self, namespace: str, key: str) -> dict[str, Any] | None: ...

    @abstractmethod
    def list_documents(self, namespace: str) -> dict[str, dict[str, Any]]: ...

    @abstractmethod
    def delete_document(self, namespace: str, key: str) -> None: ...

    # --- change notifications ---
    @abstractmethod
    def watch(self, listener: Listener) -> Unwatch: ...

    @abstractmethod
    def reseal_secrets(self) -> int:
        """Encrypts every stored secret with the current key (``secrets.py``): those stored in plain text by an
        earlier version, or with an older key. Changes no entity, records no change; answers how many it
        rewrote."""

    @abstractmethod
    def close(self) -> None: ...

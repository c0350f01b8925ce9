"""The metadata repository on ZooKeeper (kazoo), for several machines sharing one Hermes.

Znode layout under the root (default ``/hermes``); every payload is the entity's Hermes JSON:

    groups/{group}                         {"groupName": ...}
    groups/{group}/{topic}                 topic JSON; its children are its subscriptions
    groups/{group}/{topic}/{subscription}  subscription JSON (endpoint passwords included, as Hermes stores them)
    schemas/{group.topic}/{version:010d}   Avro schema text
    oauth-providers/{name}                 provider JSON (client secret included)
    documents/{namespace}/{quoted key}     operational JSON documents
    changes/c{sequence}                    change log: {"kind", "action", "key"} (zookeeper_changes.py)

A topic's subscriptions are its children, so ZooKeeper itself refuses to delete a topic that has
subscriptions or a group that has topics. Updates are read-modify-write with the znode version checked in
the same transaction as the change-log entry: a concurrent update fails the check and is retried, so no
update is ever lost.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, unquote

import orjson
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError

from hermes.domain import api_json
from hermes.domain.names import TopicName
from hermes.domain.oauth import OAuthProvider
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Group, Topic
from hermes.errors import (
    GroupAlreadyExists,
    GroupNotEmpty,
    GroupNotFound,
    OAuthProviderAlreadyExists,
    OAuthProviderNotFound,
    SchemaNotFound,
    StoredEntityInvalid,
    SubscriptionAlreadyExists,
    SubscriptionNotFound,
    TopicAlreadyExists,
    TopicNotEmpty,
    TopicNotFound,
)
from hermes.metadata.documents import UNWATCHED
from hermes.metadata.repository import (
    ChangeAction,
    ChangeKind,
    Listener,
    MetadataRepository,
    Repair,
    Unwatch,
    now_ms,
    subscription_key,
)
from hermes.metadata.secrets import StoredSecrets
from hermes.metadata.stored import StoredReader, or_invalid
from hermes.metadata.zookeeper_changes import ZookeeperChangeLog
from hermes.metadata.zookeeper_session import ZookeeperSession, reaching_zookeeper

log = logging.getLogger(__name__)
T = TypeVar("T")


class ZookeeperMetadataRepository(MetadataRepository):
    def __init__(
        self, connect: str, secrets: StoredSecrets, root: str = "/hermes", session_timeout: float = 10.0
    ) -> None:
        self._root = root.rstrip("/") or "/hermes"
        self._secrets = secrets
        self._stored = StoredReader(secrets.unseal_subscription)
        parts = ("groups", "schemas", "oauth-providers", "documents", "changes")
        paths = tuple(self._path(part) for part in parts)
        self.session = ZookeeperSession(connect, session_timeout, max(session_timeout, 10.0), paths)
        self._client = self.session.client
        self._changes = ZookeeperChangeLog(self._client, self._path("changes"))

    # --- plumbing ---

    def _path(self, *parts: str) -> str:
        return "/".join((self._root, *parts))

    def _topic_path(self, name: TopicName) -> str:
        return self._path("groups", name.group, name.name)

    def _read_json(self, path: str) -> tuple[Any, int]:
        data, stat = self._client.get(path)
        return orjson.loads(data), stat.version

    def _commit(self, operations: Callable[[Any], None], change: tuple[ChangeKind, ChangeAction, str]) -> None:
        """Runs ``operations`` and appends the change-log entry in one transaction; raises the first failure."""
        transaction = self._client.transaction()
        operations(transaction)
        self._changes.append(transaction, *change)
        for result in transaction.commit():
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise result

    def _update(
        self,
        path: str,
        load: Callable[[bytes], T],
        dump: Callable[[T], bytes],
        change: Callable[[T], T],
        entry: tuple[ChangeKind, ChangeAction, str],
        repair: Callable[[StoredEntityInvalid], T] | None = None,
    ) -> T:
        """``repair``: what replaces a stored entity that fails validation (StoredEntityInvalid without it)."""
        while True:
            data, stat = self._client.get(path)
            try:
                current = load(data)
            except StoredEntityInvalid as invalid:
                if repair is None:
                    raise
                updated = repair(invalid)
            else:
                updated = change(current)
            try:
                body = dump(updated)
                self._commit(functools.partial(_set_data, path=path, body=body, version=stat.version), entry)
            except BadVersionError:
                continue  # somebody else updated it first: apply our change to their version
            return updated

    # --- groups ---

    @reaching_zookeeper
    def create_group(self, group: Group) -> Group:
        try:
            self._commit(
                lambda t: t.create(self._path("groups", group.name), orjson.dumps({"groupName": group.name})),
                (ChangeKind.GROUP, ChangeAction.CREATED, group.name),
            )
        except NodeExistsError:
            raise GroupAlreadyExists(f"Group {group.name} already exists") from None
        return group

    @reaching_zookeeper
    def get_group(self, name: str) -> Group:
        if not self._client.exists(self._path("groups", name)):
            raise GroupNotFound(f"Group {name} not found")
        return Group(name)

    @reaching_zookeeper
    def list_groups(self) -> list[Group]:
        return [Group(name) for name in sorted(self._client.get_children(self._path("groups")))]

    @reaching_zookeeper
    def delete_group(self, name: str) -> None:
        try:
            self._commit(lambda t: t.delete(self._path("groups", name)), (ChangeKind.GROUP, ChangeAction.DELETED, name))
        except NoNodeError:
            raise GroupNotFound(f"Group {name} not found") from None
        except NotEmptyError:
            raise GroupNotEmpty(f"Group {name} has topics; delete them first") from None

    # --- topics ---

    @reaching_zookeeper
    def create_topic(self, topic: Topic) -> Topic:
        now = now_ms()
        stored = dataclasses.replace(topic, created_at=now, modified_at=now)
        if not self._client.exists(self._path("groups", topic.name.group)):
            raise GroupNotFound(f"Group {topic.name.group} not found")
        try:
            self._commit(
                lambda t: t.create(self._topic_path(topic.name), orjson.dumps(api_json.topic_to_json(stored))),
                (ChangeKind.TOPIC, ChangeAction.CREATED, topic.qualified_name),
            )
        except NodeExistsError:
            raise TopicAlreadyExists(f"Topic {topic.qualified_name} already exists") from None
        except NoNodeError:  # the group went away meanwhile
            raise GroupNotFound(f"Group {topic.name.group} not found") from None
        return stored

    @reaching_zookeeper
    def get_topic(self, name: TopicName) -> Topic:
        try:
            data, _ = self._client.get(self._topic_path(name))
        except NoNodeError:
            raise TopicNotFound(f"Topic {name.qualified} not found") from None
        return self._stored.topic(name.qualified, data)

    @reaching_zookeeper
    def stored_topics(self, group: str | None = None) -> list[Topic | StoredEntityInvalid]:
        topics: list[Topic | StoredEntityInvalid] = []
        for name in self._topic_names(group):
            with contextlib.suppress(TopicNotFound):
                topics.append(or_invalid(self.get_topic, name))
        return topics

    def _topic_names(self, group: str | None = None) -> list[TopicName]:
        """The topics' nodes, by qualified name, whether what they hold is valid or not."""
        names = []
        for g in [group] if group is not None else [g.name for g in self.list_groups()]:
            with contextlib.suppress(NoNodeError):
                names += [TopicName(g, name) for name in self._client.get_children(self._path("groups", g))]
        return sorted(names, key=lambda name: name.qualified)

    @reaching_zookeeper
    def update_topic(
        self, name: TopicName, change: Callable[[Topic], Topic], repair: Repair[Topic] | None = None
    ) -> Topic:
        def apply(current: Topic) -> Topic:
            return dataclasses.replace(change(current), name=name, created_at=current.created_at, modified_at=now_ms())

        def replace(invalid: StoredEntityInvalid) -> Topic:
            assert repair is not None
            return dataclasses.replace(repair(invalid.stored), name=name, modified_at=now_ms())

        try:
            return self._update(
                self._topic_path(name),
                functools.partial(self._stored.topic, name.qualified),
                lambda t: orjson.dumps(api_json.topic_to_json(t)),
                apply,
                (ChangeKind.TOPIC, ChangeAction.UPDATED, name.qualified),
                replace if repair is not None else None,
            )
        except NoNodeError:
            raise TopicNotFound(f"Topic {name.qualified} not found") from None

    @reaching_zookeeper
    def delete_topic(self, name: TopicName) -> None:
        try:
            self._commit(
                lambda t: t.delete(self._topic_path(name)), (ChangeKind.TOPIC, ChangeAction.DELETED, name.qualified)
            )
        except NoNodeError:
            raise TopicNotFound(f"Topic {name.qualified} not found") from None
        except NotEmptyError:
            raise TopicNotEmpty(f"Topic {name.qualified} has subscriptions; delete them first") from None
        with contextlib.suppress(NoNodeError):
            self._client.delete(self._path("schemas", name.qualified), recursive=True)

    # --- schemas ---

    @reaching_zookeeper
    def save_schema(self, topic: TopicName, schema: str) -> int:
        self.get_topic(topic)
        base = self._path("schemas", topic.qualified)
        self._client.ensure_path(base)
        while True:
            version = max(self.list_schema_versions(topic), default=0) + 1
            try:
                self._commit(
                    functools.partial(_create, path=f"{base}/{version:010d}", body=schema.encode()),
                    (ChangeKind.SCHEMA, ChangeAction.CREATED, topic.qualified),
                )
            except NodeExistsError:
                continue  # a concurrent save took this version number
            return version

    @reaching_zookeeper
    def get_schema(self, topic: TopicName, version: int | None = None) -> tuple[int, str]:
        versions = self.list_schema_versions(topic)
        chosen = versions[-1] if version is None and versions else version
        if chosen is None or chosen not in versions:
            which = "any" if version is None else f"version {version}"
            raise SchemaNotFound(f"Topic {topic.qualified} has no schema of {which}")
        data, _ = self._client.get(self._path("schemas", topic.qualified, f"{chosen:010d}"))
        return chosen, data.decode()

    @reaching_zookeeper
    def list_schema_versions(self, topic: TopicName) -> list[int]:
        try:
            return sorted(int(v) for v in self._client.get_children(self._path("schemas", topic.qualified)))
        except NoNodeError:
            return []

    # --- subscriptions ---

    def _subscription_path(self, topic: TopicName, name: str) -> str:
        return f"{self._topic_path(topic)}/{name}"

    def _dump_subscription(self, sub: Subscription) -> bytes:
        return orjson.dumps(self._secrets.seal_subscription(api_json.subscription_to_json(sub, mask_secrets=False)))

    @reaching_zookeeper
    def create_subscription(self, subscription: Subscription) -> Subscription:
        now = now_ms()
        stored = dataclasses.replace(subscription, created_at=now, modified_at=now)
        topic = subscription.topic_name
        try:
            self._commit(
                lambda t: t.create(self._subscription_path(topic, subscription.name), self._dump_subscription(stored)),
                (ChangeKind.SUBSCRIPTION, ChangeAction.CREATED, subscription_key(topic, subscription.name)),
            )
        except NodeExistsError:
            raise SubscriptionAlreadyExists(f"Subscription {subscription.qualified_name} already exists") from None
        except NoNodeError:
            raise TopicNotFound(f"Topic {topic.qualified} not found") from None
        return stored

    @reaching_zookeeper
    def get_subscription(self, topic: TopicName, name: str) -> Subscription:
        try:
            data, _ = self._client.get(self._subscription_path(topic, name))
        except NoNodeError:
            raise SubscriptionNotFound(f"Subscription {topic.qualified}${name} not found") from None
        return self._stored.subscription(topic, name, data)

    @reaching_zookeeper
    def stored_subscriptions(self, topic: TopicName | None = None) -> list[Subscription | StoredEntityInvalid]:
        topics = [topic] if topic is not None else self._topic_names()
        subs: list[Subscription | StoredEntityInvalid] = []
        for t in topics:
            with contextlib.suppress(NoNodeError):
                for name in sorted(self._client.get_children(self._topic_path(t))):
                    with contextlib.suppress(SubscriptionNotFound):
                        subs.append(or_invalid(self.get_subscription, t, name))
        return subs

    @reaching_zookeeper
    def update_subscription(
        self,
        topic: TopicName,
        name: str,
        change: Callable[[Subscription], Subscription],
        repair: Repair[Subscription] | None = None,
    ) -> Subscription:
        def apply(current: Subscription) -> Subscription:
            return dataclasses.replace(
                change(current), topic_name=topic, name=name, created_at=current.created_at, modified_at=now_ms()
            )

        def replace(invalid: StoredEntityInvalid) -> Subscription:
            assert repair is not None
            return dataclasses.replace(repair(invalid.stored), topic_name=topic, name=name, modified_at=now_ms())

        try:
            return self._update(
                self._subscription_path(topic, name),
                functools.partial(self._stored.subscription, topic, name),
                self._dump_subscription,
                apply,
                (ChangeKind.SUBSCRIPTION, ChangeAction.UPDATED, subscription_key(topic, name)),
                replace if repair is not None else None,
            )
        except NoNodeError:
            raise SubscriptionNotFound(f"Subscription {topic.qualified}${name} not found") from None

    @reaching_zookeeper
    def delete_subscription(self, topic: TopicName, name: str) -> None:
        try:
            self._commit(
                lambda t: t.delete(self._subscription_path(topic, name)),
                (ChangeKind.SUBSCRIPTION, ChangeAction.DELETED, subscription_key(topic, name)),
            )
        except NoNodeError:
            raise SubscriptionNotFound(f"Subscription {topic.qualified}${name} not found") from None

    # --- OAuth providers ---

    def _provider_path(self, name: str) -> str:
        return self._path("oauth-providers", name)

    def _dump_provider(self, provider: OAuthProvider) -> bytes:
        return orjson.dumps(self._secrets.seal_provider(api_json.oauth_provider_to_json(provider, mask_secrets=False)))

    def _load_provider(self, data: Any) -> OAuthProvider:
        return api_json.oauth_provider_from_json(self._secrets.unseal_provider(data))

    @reaching_zookeeper
    def reseal_secrets(self) -> int:
        paths = [
            (self._subscription_path(topic, name), f"subscription {topic}${name}", self._secrets.reseal_subscription)
            for topic in self._topic_names()  # also the subscriptions of a topic that fails validation
            for name in self._children(self._topic_path(topic))
        ]
        paths += [
            (self._provider_path(name), f"OAuth provider {name}", self._secrets.reseal_provider)
            for name in self._children(self._path("oauth-providers"))
        ]
        resealed = 0
        for path, what, reseal in paths:
            while True:
                try:
                    body, stat = self._client.get(path)
                    sealed = reseal(what, body)
                    if sealed is not None:
                        self._client.set(path, sealed, version=stat.version)
                        resealed += 1
                except NoNodeError:
                    pass  # deleted meanwhile
                except BadVersionError:
                    continue  # changed meanwhile: seal its new version
                break
        return resealed

    def _children(self, path: str) -> list[str]:
        try:
            return list(self._client.get_children(path))
        except NoNodeError:
            return []

    @reaching_zookeeper
    def create_oauth_provider(self, provider: OAuthProvider) -> OAuthProvider:
        try:
            self._commit(
                lambda t: t.create(self._provider_path(provider.name), self._dump_provider(provider)),
                (ChangeKind.OAUTH_PROVIDER, ChangeAction.CREATED, provider.name),
            )
        except NodeExistsError:
            raise OAuthProviderAlreadyExists(f"OAuth provider {provider.name} already exists") from None
        return provider

    @reaching_zookeeper
    def get_oauth_provider(self, name: str) -> OAuthProvider:
        try:
            data, _ = self._read_json(self._provider_path(name))
        except NoNodeError:
            raise OAuthProviderNotFound(f"OAuth provider {name} not found") from None
        return self._load_provider(data)

    @reaching_zookeeper
    def list_oauth_providers(self) -> list[OAuthProvider]:
        providers = []
        for name in sorted(self._client.get_children(self._path("oauth-providers"))):
            with contextlib.suppress(OAuthProviderNotFound):
                providers.append(self.get_oauth_provider(name))
        return providers

    @reaching_zookeeper
    def update_oauth_provider(self, name: str, change: Callable[[OAuthProvider], OAuthProvider]) -> OAuthProvider:
        try:
            return self._update(
                self._provider_path(name),
                lambda body: self._load_provider(orjson.loads(body)),
                self._dump_provider,
                lambda p: dataclasses.replace(change(p), name=name),
                (ChangeKind.OAUTH_PROVIDER, ChangeAction.UPDATED, name),
            )
        except NoNodeError:
            raise OAuthProviderNotFound(f"OAuth provider {name} not found") from None

    @reaching_zookeeper
    def delete_oauth_provider(self, name: str) -> None:
        try:
            self._commit(
                lambda t: t.delete(self._provider_path(name)), (ChangeKind.OAUTH_PROVIDER, ChangeAction.DELETED, name)
            )
        except NoNodeError:
            raise OAuthProviderNotFound(f"OAuth provider {name} not found") from None

    # --- documents ---

    def _document_path(self, namespace: str, key: str) -> str:
        return self._path("documents", quote(namespace, safe=""), quote(key, safe=""))

    @reaching_zookeeper
    def put_document(self, namespace: str, key: str, document: dict[str, Any]) -> None:
        path = self._document_path(namespace, key)
        body = orjson.dumps(document)
        entry = (ChangeKind.DOCUMENT, ChangeAction.UPDATED, f"{namespace}/{key}")
        while True:
            try:
                if namespace in UNWATCHED:
                    if self._client.exists(path):
                        self._client.set(path, body)
                    else:
                        self._client.create(path, body, makepath=True)
                elif self._client.exists(path):
                    self._commit(lambda t: t.set_data(path, body), entry)
                else:
                    self._client.ensure_path(path.rsplit("/", 1)[0])
                    self._commit(lambda t: t.create(path, body), entry)
                return
            except (NodeExistsError, NoNodeError):
                continue  # raced with a concurrent put or delete: try again with what is there now

    @reaching_zookeeper
    def get_document(self, namespace: str, key: str) -> dict[str, Any] | None:
        try:
            data, _ = self._read_json(self._document_path(namespace, key))
        except NoNodeError:
            return None
        return data  # type: ignore[no-any-return]

    @reaching_zookeeper
    def list_documents(self, namespace: str) -> dict[str, dict[str, Any]]:
        base = self._path("documents", quote(namespace, safe=""))
        try:
            names = self._client.get_children(base)
        except NoNodeError:
            return {}
        out = {}
        for name in sorted(names):
            with contextlib.suppress(NoNodeError):
                out[unquote(name)], _ = self._read_json(f"{base}/{name}")
        return out

    @reaching_zookeeper
    def delete_document(self, namespace: str, key: str) -> None:
        with contextlib.suppress(NoNodeError):
            self._commit(
                lambda t: t.delete(self._document_path(namespace, key)),
                (ChangeKind.DOCUMENT, ChangeAction.DELETED, f"{namespace}/{key}"),
            )

    # --- change notifications ---

    @reaching_zookeeper
    def watch(self, listener: Listener) -> Unwatch:
        return self._changes.watch(listener)

    def close(self) -> None:
        self.session.close()


def _set_data(transaction: Any, path: str, body: bytes, version: int) -> None:
    transaction.set_data(path, body, version=version)


def _create(transaction: Any, path: str, body: bytes) -> None:
    transaction.create(path, body)

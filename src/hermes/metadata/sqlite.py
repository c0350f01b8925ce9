"""The embedded metadata repository: one SQLite file in the data directory.

Entities are stored as their Hermes JSON, their secrets encrypted (``secrets.py``). Every
write records its change in the same transaction, in the change log that watchers follow (``sqlite_changes.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson

from hermes.domain import api_json
from hermes.domain.names import TopicName
from hermes.domain.oauth import OAuthProvider
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Group, Topic
from hermes.errors import (
    AlreadyExistsError,
    GroupAlreadyExists,
    GroupNotEmpty,
    GroupNotFound,
    MetadataUnavailable,
    NotFoundError,
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
from hermes.metadata.sqlite_changes import SqliteChangeLog, record
from hermes.metadata.stored import StoredReader, or_invalid

log = logging.getLogger(__name__)
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS groups (name TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS topics (name TEXT PRIMARY KEY, grp TEXT NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS schemas (topic TEXT NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (topic, version));
CREATE TABLE IF NOT EXISTS subscriptions (topic TEXT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (topic, name));
CREATE TABLE IF NOT EXISTS oauth_providers (name TEXT PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS documents (namespace TEXT NOT NULL, key TEXT NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (namespace, key));
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,
    action TEXT NOT NULL, key TEXT NOT NULL);
"""


class SqliteMetadataRepository(MetadataRepository):
    def __init__(self, path: Path, secrets: StoredSecrets, poll_interval: float = 0.2) -> None:
        self._path = path
        self._secrets = secrets
        self._stored = StoredReader(secrets.unseal_subscription)
        self._changes = SqliteChangeLog(self._connect, poll_interval)
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # SQLite gives its -wal and -shm files the database file's mode: 0600, as stores made before had 0644
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
            path.chmod(0o600)
            db = self._connect()
            try:
                db.executescript(_SCHEMA)
            finally:
                db.close()
        except (OSError, sqlite3.Error) as exc:
            raise MetadataUnavailable(f"cannot open metadata database {path}: {exc}") from exc

    # --- plumbing ---

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self._path, timeout=10, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One immediate (write-locked) transaction: read-modify-write inside it cannot lose an update."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()
        self._changes.wake()

    @staticmethod
    def _one(db: sqlite3.Connection, sql: str, args: tuple[Any, ...], missing: NotFoundError) -> Any:
        row = db.execute(sql, args).fetchone()
        if row is None:
            raise missing
        return row[0]

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        db = self._connect()
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    @staticmethod
    def _insert(db: sqlite3.Connection, sql: str, args: tuple[Any, ...], exists: AlreadyExistsError) -> None:
        try:
            db.execute(sql, args)
        except sqlite3.IntegrityError:
            raise exists from None

    # --- groups ---

    def create_group(self, group: Group) -> Group:
        with self._tx() as db:
            self._insert(
                db,
                "INSERT INTO groups VALUES (?)",
                (group.name,),
                GroupAlreadyExists(f"Group {group.name} already exists"),
            )
            record(db, ChangeKind.GROUP, ChangeAction.CREATED, group.name)
        return group

    def get_group(self, name: str) -> Group:
        if not self._read("SELECT name FROM groups WHERE name = ?", (name,)):
            raise GroupNotFound(f"Group {name} not found")
        return Group(name)

    def list_groups(self) -> list[Group]:
        return [Group(row[0]) for row in self._read("SELECT name FROM groups ORDER BY name")]

    def delete_group(self, name: str) -> None:
        with self._tx() as db:
            self._one(db, "SELECT name FROM groups WHERE name = ?", (name,), GroupNotFound(f"Group {name} not found"))
            if db.execute("SELECT 1 FROM topics WHERE grp = ? LIMIT 1", (name,)).fetchone():
                raise GroupNotEmpty(f"Group {name} has topics; delete them first")
            db.execute("DELETE FROM groups WHERE name = ?", (name,))
            record(db, ChangeKind.GROUP, ChangeAction.DELETED, name)

    # --- topics ---

    @staticmethod
    def _topic_not_found(name: TopicName) -> TopicNotFound:
        return TopicNotFound(f"Topic {name.qualified} not found")

    def create_topic(self, topic: Topic) -> Topic:
        now = now_ms()
        stored = _replace(topic, created_at=now, modified_at=now)
        with self._tx() as db:
            self._one(
                db,
                "SELECT name FROM groups WHERE name = ?",
                (topic.name.group,),
                GroupNotFound(f"Group {topic.name.group} not found"),
            )
            self._insert(
                db,
                "INSERT INTO topics VALUES (?, ?, ?)",
                (topic.qualified_name, topic.name.group, orjson.dumps(api_json.topic_to_json(stored))),
                TopicAlreadyExists(f"Topic {topic.qualified_name} already exists"),
            )
            record(db, ChangeKind.TOPIC, ChangeAction.CREATED, topic.qualified_name)
        return stored

    def get_topic(self, name: TopicName) -> Topic:
        rows = self._read("SELECT body FROM topics WHERE name = ?", (name.qualified,))
        if not rows:
            raise self._topic_not_found(name)
        return self._stored.topic(name.qualified, rows[0][0])

    def stored_topics(self, group: str | None = None) -> list[Topic | StoredEntityInvalid]:
        if group is None:
            rows = self._read("SELECT name, body FROM topics ORDER BY name")
        else:
            rows = self._read("SELECT name, body FROM topics WHERE grp = ? ORDER BY name", (group,))
        return [or_invalid(self._stored.topic, name, body) for name, body in rows]

    def update_topic(
        self, name: TopicName, change: Callable[[Topic], Topic], repair: Repair[Topic] | None = None
    ) -> Topic:
        with self._tx() as db:
            body = self._one(
                db, "SELECT body FROM topics WHERE name = ?", (name.qualified,), self._topic_not_found(name)
            )
            try:
                current = self._stored.topic(name.qualified, body)
            except StoredEntityInvalid as invalid:
                if repair is None:
                    raise
                updated = _replace(repair(invalid.stored), name=name, modified_at=now_ms())
            else:
                updated = _replace(change(current), name=name, created_at=current.created_at, modified_at=now_ms())
            db.execute(
                "UPDATE topics SET body = ? WHERE name = ?",
                (orjson.dumps(api_json.topic_to_json(updated)), name.qualified),
            )
            record(db, ChangeKind.TOPIC, ChangeAction.UPDATED, name.qualified)
        return updated

    def delete_topic(self, name: TopicName) -> None:
        with self._tx() as db:
            self._one(db, "SELECT name FROM topics WHERE name = ?", (name.qualified,), self._topic_not_found(name))
            if db.execute("SELECT 1 FROM subscriptions WHERE topic = ? LIMIT 1", (name.qualified,)).fetchone():
                raise TopicNotEmpty(f"Topic {name.qualified} has subscriptions; delete them first")
            db.execute("DELETE FROM topics WHERE name = ?", (name.qualified,))
            db.execute("DELETE FROM schemas WHERE topic = ?", (name.qualified,))
            record(db, ChangeKind.TOPIC, ChangeAction.DELETED, name.qualified)

    # --- schemas ---

    def save_schema(self, topic: TopicName, schema: str) -> int:
        with self._tx() as db:
            self._one(db, "SELECT name FROM topics WHERE name = ?", (topic.qualified,), self._topic_not_found(topic))
            latest = db.execute("SELECT MAX(version) FROM schemas WHERE topic = ?", (topic.qualified,)).fetchone()[0]
            version = (latest or 0) + 1
            db.execute("INSERT INTO schemas VALUES (?, ?, ?)", (topic.qualified, version, schema))
            record(db, ChangeKind.SCHEMA, ChangeAction.CREATED, topic.qualified)
        return version

    def get_schema(self, topic: TopicName, version: int | None = None) -> tuple[int, str]:
        if version is None:
            rows = self._read(
                "SELECT version, body FROM schemas WHERE topic = ? ORDER BY version DESC LIMIT 1", (topic.qualified,)
            )
        else:
            rows = self._read(
                "SELECT version, body FROM schemas WHERE topic = ? AND version = ?", (topic.qualified, version)
            )
        if not rows:
            which = "any" if version is None else f"version {version}"
            raise SchemaNotFound(f"Topic {topic.qualified} has no schema of {which}")
        return int(rows[0][0]), str(rows[0][1])

    def list_schema_versions(self, topic: TopicName) -> list[int]:
        rows = self._read("SELECT version FROM schemas WHERE topic = ? ORDER BY version", (topic.qualified,))
        return [int(r[0]) for r in rows]

    # --- subscriptions ---

    @staticmethod
    def _subscription_not_found(topic: TopicName, name: str) -> SubscriptionNotFound:
        return SubscriptionNotFound(f"Subscription {topic.qualified}${name} not found")

    def _dump_subscription(self, subscription: Subscription) -> bytes:
        return orjson.dumps(
            self._secrets.seal_subscription(api_json.subscription_to_json(subscription, mask_secrets=False))
        )

    def _load_provider(self, body: bytes) -> OAuthProvider:
        return api_json.oauth_provider_from_json(self._secrets.unseal_provider(orjson.loads(body)))

    def _dump_provider(self, provider: OAuthProvider) -> bytes:
        return orjson.dumps(self._secrets.seal_provider(api_json.oauth_provider_to_json(provider, mask_secrets=False)))

    def create_subscription(self, subscription: Subscription) -> Subscription:
        now = now_ms()
        stored = _replace(subscription, created_at=now, modified_at=now)
        topic = subscription.topic_name
        with self._tx() as db:
            self._one(db, "SELECT name FROM topics WHERE name = ?", (topic.qualified,), self._topic_not_found(topic))
            body = self._dump_subscription(stored)
            self._insert(
                db,
                "INSERT INTO subscriptions VALUES (?, ?, ?)",
                (topic.qualified, subscription.name, body),
                SubscriptionAlreadyExists(f"Subscription {topic.qualified}${subscription.name} already exists"),
            )
            record(db, ChangeKind.SUBSCRIPTION, ChangeAction.CREATED, subscription_key(topic, subscription.name))
        return stored

    def get_subscription(self, topic: TopicName, name: str) -> Subscription:
        rows = self._read("SELECT body FROM subscriptions WHERE topic = ? AND name = ?", (topic.qualified, name))
        if not rows:
            raise self._subscription_not_found(topic, name)
        return self._stored.subscription(topic, name, rows[0][0])

    def stored_subscriptions(self, topic: TopicName | None = None) -> list[Subscription | StoredEntityInvalid]:
        if topic is None:
            rows = self._read("SELECT topic, name, body FROM subscriptions ORDER BY topic, name")
        else:
            rows = self._read(
                "SELECT topic, name, body FROM subscriptions WHERE topic = ? ORDER BY name", (topic.qualified,)
            )
        return [or_invalid(self._stored.subscription, TopicName.parse(t), name, body) for t, name, body in rows]

    def update_subscription(
        self,
        topic: TopicName,
        name: str,
        change: Callable[[Subscription], Subscription],
        repair: Repair[Subscription] | None = None,
    ) -> Subscription:
        with self._tx() as db:
            body = self._one(
                db,
                "SELECT body FROM subscriptions WHERE topic = ? AND name = ?",
                (topic.qualified, name),
                self._subscription_not_found(topic, name),
            )
            try:
                current = self._stored.subscription(topic, name, body)
            except StoredEntityInvalid as invalid:
                if repair is None:
                    raise
                updated = _replace(repair(invalid.stored), topic_name=topic, name=name, modified_at=now_ms())
            else:
                updated = _replace(
                    change(current), topic_name=topic, name=name, created_at=current.created_at, modified_at=now_ms()
                )
            db.execute(
                "UPDATE subscriptions SET body = ? WHERE topic = ? AND name = ?",
                (self._dump_subscription(updated), topic.qualified, name),
            )
            record(db, ChangeKind.SUBSCRIPTION, ChangeAction.UPDATED, subscription_key(topic, name))
        return updated

    def delete_subscription(self, topic: TopicName, name: str) -> None:
        with self._tx() as db:
            self._one(
                db,
                "SELECT name FROM subscriptions WHERE topic = ? AND name = ?",
                (topic.qualified, name),
                self._subscription_not_found(topic, name),
            )
            db.execute("DELETE FROM subscriptions WHERE topic = ? AND name = ?", (topic.qualified, name))
            record(db, ChangeKind.SUBSCRIPTION, ChangeAction.DELETED, subscription_key(topic, name))

    # --- OAuth providers ---

    def reseal_secrets(self) -> int:
        with self._tx() as db:
            resealed = 0
            for topic, name, body in db.execute("SELECT topic, name, body FROM subscriptions").fetchall():
                sealed = self._secrets.reseal_subscription(f"subscription {topic}${name}", body)
                if sealed is not None:
                    db.execute("UPDATE subscriptions SET body = ? WHERE topic = ? AND name = ?", (sealed, topic, name))
                    resealed += 1
            for name, body in db.execute("SELECT name, body FROM oauth_providers").fetchall():
                sealed = self._secrets.reseal_provider(f"OAuth provider {name}", body)
                if sealed is not None:
                    db.execute("UPDATE oauth_providers SET body = ? WHERE name = ?", (sealed, name))
                    resealed += 1
        return resealed

    def create_oauth_provider(self, provider: OAuthProvider) -> OAuthProvider:
        with self._tx() as db:
            body = self._dump_provider(provider)
            self._insert(
                db,
                "INSERT INTO oauth_providers VALUES (?, ?)",
                (provider.name, body),
                OAuthProviderAlreadyExists(f"OAuth provider {provider.name} already exists"),
            )
            record(db, ChangeKind.OAUTH_PROVIDER, ChangeAction.CREATED, provider.name)
        return provider

    def get_oauth_provider(self, name: str) -> OAuthProvider:
        rows = self._read("SELECT body FROM oauth_providers WHERE name = ?", (name,))
        if not rows:
            raise OAuthProviderNotFound(f"OAuth provider {name} not found")
        return self._load_provider(rows[0][0])

    def list_oauth_providers(self) -> list[OAuthProvider]:
        rows = self._read("SELECT body FROM oauth_providers ORDER BY name")
        return [self._load_provider(r[0]) for r in rows]

    def update_oauth_provider(self, name: str, change: Callable[[OAuthProvider], OAuthProvider]) -> OAuthProvider:
        with self._tx() as db:
            body = self._one(
                db,
                "SELECT body FROM oauth_providers WHERE name = ?",
                (name,),
                OAuthProviderNotFound(f"OAuth provider {name} not found"),
            )
            updated = _replace(change(self._load_provider(body)), name=name)
            db.execute(
                "UPDATE oauth_providers SET body = ? WHERE name = ?",
                (self._dump_provider(updated), name),
            )
            record(db, ChangeKind.OAUTH_PROVIDER, ChangeAction.UPDATED, name)
        return updated

    def delete_oauth_provider(self, name: str) -> None:
        with self._tx() as db:
            self._one(
                db,
                "SELECT name FROM oauth_providers WHERE name = ?",
                (name,),
                OAuthProviderNotFound(f"OAuth provider {name} not found"),
            )
            db.execute("DELETE FROM oauth_providers WHERE name = ?", (name,))
            record(db, ChangeKind.OAUTH_PROVIDER, ChangeAction.DELETED, name)

    # --- documents ---

    def put_document(self, namespace: str, key: str, document: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO documents VALUES (?, ?, ?)", (namespace, key, orjson.dumps(document)))
            if namespace not in UNWATCHED:
                record(db, ChangeKind.DOCUMENT, ChangeAction.UPDATED, f"{namespace}/{key}")

    def put_documents(self, namespace: str, documents: dict[str, dict[str, Any]]) -> None:
        """In one transaction: a consumers process writes every subscription's metrics snapshot at once."""
        with self._tx() as db:
            for key, document in documents.items():
                db.execute(
                    "INSERT OR REPLACE INTO documents VALUES (?, ?, ?)", (namespace, key, orjson.dumps(document))
                )
                if namespace not in UNWATCHED:
                    record(db, ChangeKind.DOCUMENT, ChangeAction.UPDATED, f"{namespace}/{key}")

    def get_document(self, namespace: str, key: str) -> dict[str, Any] | None:
        rows = self._read("SELECT body FROM documents WHERE namespace = ? AND key = ?", (namespace, key))
        return orjson.loads(rows[0][0]) if rows else None

    def list_documents(self, namespace: str) -> dict[str, dict[str, Any]]:
        rows = self._read("SELECT key, body FROM documents WHERE namespace = ? ORDER BY key", (namespace,))
        return {r[0]: orjson.loads(r[1]) for r in rows}

    def delete_document(self, namespace: str, key: str) -> None:
        with self._tx() as db:
            if db.execute("DELETE FROM documents WHERE namespace = ? AND key = ?", (namespace, key)).rowcount:
                record(db, ChangeKind.DOCUMENT, ChangeAction.DELETED, f"{namespace}/{key}")

    # --- change notifications ---

    def watch(self, listener: Listener) -> Unwatch:
        return self._changes.watch(listener)

    def close(self) -> None:
        self._changes.close()


def _replace(obj: T, **changes: Any) -> T:
    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]

"""One contract, every metadata repository: SQLite (embedded default) and ZooKeeper (real server)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from cryptography.fernet import Fernet

from hermes.bench.zookeeper import ZookeeperServer
from hermes.domain import api_json
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.names import TopicName
from hermes.domain.oauth import OAuthProvider
from hermes.domain.subscription import Header, OAuthPolicy, Subscription, SubscriptionState
from hermes.domain.topic import Group, Topic
from hermes.errors import (
    GroupAlreadyExists,
    GroupNotEmpty,
    GroupNotFound,
    MetadataUnavailable,
    MetadataUnreachable,
    OAuthProviderNotFound,
    SchemaNotFound,
    StoredEntityInvalid,
    SubscriptionAlreadyExists,
    SubscriptionNotFound,
    TopicAlreadyExists,
    TopicNotEmpty,
    TopicNotFound,
)
from hermes.metadata.cache import MetadataCache
from hermes.metadata.repository import ChangeAction, ChangeKind, MetadataChange, MetadataRepository
from hermes.metadata.secrets import SecretKeys, StoredSecrets, key_file
from hermes.metadata.sqlite import SqliteMetadataRepository
from hermes.metadata.zookeeper import ZookeeperMetadataRepository
from tests.conftest import wait_until
from tests.support.hermes import unique

pytestmark = pytest.mark.contract

Factory = Callable[[], MetadataRepository]


@pytest.fixture(params=["sqlite", "zookeeper"])
def open_repository(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """Opens repositories that share one store, as several Hermes processes do."""
    opened: list[MetadataRepository] = []
    root = f"/{unique('hermes')}"

    def factory() -> MetadataRepository:
        secrets = StoredSecrets(SecretKeys(key_file(tmp_path)))  # each its own: the file is shared
        if request.param == "sqlite":
            repository: MetadataRepository = SqliteMetadataRepository(tmp_path / "metadata.sqlite3", secrets, 0.05)
        else:
            server: ZookeeperServer = request.getfixturevalue("zookeeper")
            repository = ZookeeperMetadataRepository(server.connect, secrets, root)
        opened.append(repository)
        return repository

    yield factory
    for repository in opened:
        repository.close()


@pytest.fixture
def repo(open_repository: Factory) -> MetadataRepository:
    return open_repository()


TOPIC = TopicName("com.example", "orders")


def _topic(repo: MetadataRepository, name: TopicName = TOPIC) -> Topic:
    with contextlib.suppress(GroupAlreadyExists):
        repo.create_group(Group(name.group))
    return repo.create_topic(Topic(name, description="orders"))


def _subscription(name: str = "s1", topic: TopicName = TOPIC) -> Subscription:
    return Subscription(topic, name, EndpointAddress("http://user:secret@service/"), description="d")


def test_groups(repo: MetadataRepository) -> None:
    repo.create_group(Group("com.example"))
    with pytest.raises(GroupAlreadyExists):
        repo.create_group(Group("com.example"))
    assert repo.get_group("com.example") == Group("com.example")
    assert [g.name for g in repo.list_groups()] == ["com.example"]
    repo.delete_group("com.example")
    with pytest.raises(GroupNotFound):
        repo.get_group("com.example")
    with pytest.raises(GroupNotFound):
        repo.delete_group("com.example")


def test_a_group_with_topics_cannot_be_deleted(repo: MetadataRepository) -> None:
    _topic(repo)
    with pytest.raises(GroupNotEmpty):
        repo.delete_group("com.example")


def test_topics(repo: MetadataRepository) -> None:
    with pytest.raises(GroupNotFound):
        repo.create_topic(Topic(TOPIC))
    created = _topic(repo)
    assert created.created_at > 0 and created.modified_at == created.created_at
    with pytest.raises(TopicAlreadyExists):
        repo.create_topic(Topic(TOPIC))
    assert repo.get_topic(TOPIC) == created
    assert [t.qualified_name for t in repo.list_topics()] == ["com.example.orders"]
    assert repo.list_topics("other") == []
    updated = repo.update_topic(TOPIC, lambda t: dataclasses.replace(t, description="changed"))
    assert repo.get_topic(TOPIC).description == "changed" == updated.description
    assert updated.created_at == created.created_at
    repo.delete_topic(TOPIC)
    with pytest.raises(TopicNotFound):
        repo.get_topic(TOPIC)
    with pytest.raises(TopicNotFound):
        repo.update_topic(TOPIC, lambda t: t)


def test_schemas_are_versioned_per_topic(repo: MetadataRepository) -> None:
    _topic(repo)
    with pytest.raises(SchemaNotFound):
        repo.get_schema(TOPIC)
    assert repo.save_schema(TOPIC, '{"type": "string"}') == 1
    assert repo.save_schema(TOPIC, '{"type": "long"}') == 2
    assert repo.get_schema(TOPIC) == (2, '{"type": "long"}')
    assert repo.get_schema(TOPIC, 1) == (1, '{"type": "string"}')
    assert repo.list_schema_versions(TOPIC) == [1, 2]


def test_subscriptions(repo: MetadataRepository) -> None:
    with pytest.raises(TopicNotFound):
        repo.create_subscription(_subscription())
    _topic(repo)
    created = repo.create_subscription(_subscription())
    with pytest.raises(SubscriptionAlreadyExists):
        repo.create_subscription(_subscription())
    loaded = repo.get_subscription(TOPIC, "s1")
    assert loaded == created
    assert loaded.endpoint.credentials == ("user", "secret"), "the password is stored"
    repo.create_subscription(_subscription("s2"))
    assert [s.name for s in repo.list_subscriptions(TOPIC)] == ["s1", "s2"]
    assert len(repo.list_subscriptions()) == 2
    with pytest.raises(TopicNotEmpty):
        repo.delete_topic(TOPIC)
    repo.delete_subscription(TOPIC, "s1")
    with pytest.raises(SubscriptionNotFound):
        repo.get_subscription(TOPIC, "s1")
    with pytest.raises(SubscriptionNotFound):
        repo.delete_subscription(TOPIC, "s1")


def test_concurrent_updates_from_two_instances_lose_nothing(open_repository: Factory) -> None:
    first, second = open_repository(), open_repository()
    _topic(first)
    first.create_subscription(_subscription())
    per_writer = 15

    def append_headers(repo: MetadataRepository, writer: str) -> None:
        for i in range(per_writer):
            repo.update_subscription(
                TOPIC, "s1", lambda s, i=i: dataclasses.replace(s, headers=(*s.headers, Header(writer, str(i))))
            )

    threads = [threading.Thread(target=append_headers, args=(r, w)) for r, w in ((first, "a"), (second, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    headers = first.get_subscription(TOPIC, "s1").headers
    assert len(headers) == 2 * per_writer
    for writer in "ab":
        assert [h.value for h in headers if h.name == writer] == [str(i) for i in range(per_writer)]


def test_oauth_providers(repo: MetadataRepository) -> None:
    provider = OAuthProvider("auth", "http://auth/token", "client", "secret")
    repo.create_oauth_provider(provider)
    assert repo.get_oauth_provider("auth") == provider
    assert repo.list_oauth_providers() == [provider]
    repo.update_oauth_provider("auth", lambda p: dataclasses.replace(p, client_id="other"))
    assert repo.get_oauth_provider("auth").client_id == "other"
    repo.delete_oauth_provider("auth")
    with pytest.raises(OAuthProviderNotFound):
        repo.get_oauth_provider("auth")


def test_documents(repo: MetadataRepository) -> None:
    key = "com.example.orders$s1/node-1"
    assert repo.get_document("subscription-metrics", key) is None
    repo.put_document("subscription-metrics", key, {"delivered": 1})
    repo.put_document("subscription-metrics", key, {"delivered": 2})
    repo.put_document("subscription-metrics", "other", {"delivered": 3})
    assert repo.get_document("subscription-metrics", key) == {"delivered": 2}
    assert repo.list_documents("subscription-metrics") == {key: {"delivered": 2}, "other": {"delivered": 3}}
    repo.delete_document("subscription-metrics", key)
    repo.delete_document("subscription-metrics", key)  # deleting what is gone is fine
    assert list(repo.list_documents("subscription-metrics")) == ["other"]


def test_documents_written_at_once(repo: MetadataRepository) -> None:
    """How a consumers process writes every subscription's metrics snapshot."""
    repo.put_document("subscription-metrics", "a/n", {"delivered": 1})
    repo.put_documents("subscription-metrics", {"a/n": {"delivered": 2}, "b/n": {"delivered": 5}})
    repo.put_documents("subscription-metrics", {})
    assert repo.list_documents("subscription-metrics") == {"a/n": {"delivered": 2}, "b/n": {"delivered": 5}}


def test_metrics_snapshots_written_at_once_make_no_change_notification(open_repository: Factory) -> None:
    """A thousand subscriptions' snapshots a second would be a thousand notifications for every process to read."""
    writer, reader = open_repository(), open_repository()
    seen: list[MetadataChange] = []
    reader.watch(seen.append)
    writer.put_documents("subscription-metrics", {"a/n": {"delivered": 2}, "b/n": {"delivered": 5}})
    _topic(writer)  # a change that is notified, after the snapshots
    wait_until(lambda: len(seen) >= 2, timeout=5.0)
    assert [c.kind for c in seen] == [ChangeKind.GROUP, ChangeKind.TOPIC]


def test_changes_reach_watchers_of_another_instance_within_a_second(open_repository: Factory) -> None:
    writer, reader = open_repository(), open_repository()
    seen: list[MetadataChange] = []
    reader.watch(seen.append)
    _topic(writer)
    writer.create_subscription(_subscription())
    writer.update_subscription(TOPIC, "s1", lambda s: dataclasses.replace(s, state=SubscriptionState.SUSPENDED))
    writer.delete_subscription(TOPIC, "s1")
    expected = [
        MetadataChange(ChangeKind.GROUP, ChangeAction.CREATED, "com.example"),
        MetadataChange(ChangeKind.TOPIC, ChangeAction.CREATED, "com.example.orders"),
        MetadataChange(ChangeKind.SUBSCRIPTION, ChangeAction.CREATED, "com.example.orders/s1"),
        MetadataChange(ChangeKind.SUBSCRIPTION, ChangeAction.UPDATED, "com.example.orders/s1"),
        MetadataChange(ChangeKind.SUBSCRIPTION, ChangeAction.DELETED, "com.example.orders/s1"),
    ]
    wait_until(lambda: seen == expected, timeout=1.0)


def test_the_metadata_cache_follows_oauth_providers_of_another_instance(open_repository: Factory) -> None:
    writer, reader = open_repository(), open_repository()
    provider = OAuthProvider("auth", "http://auth.example.com/token", "hermes", "s3cret")
    writer.create_oauth_provider(provider)

    async def follow() -> list[str]:
        cache = MetadataCache(reader)
        await cache.start()
        changed: list[str] = []
        cache.on_oauth_provider_change(changed.append)
        try:
            assert cache.oauth_providers == {"auth": provider}, "loaded at start"
            writer.update_oauth_provider("auth", lambda p: dataclasses.replace(p, client_id="other"))
            await _until(lambda: cache.oauth_providers["auth"].client_id == "other")
            writer.delete_oauth_provider("auth")
            await _until(lambda: "auth" not in cache.oauth_providers)
        finally:
            await cache.stop()
        return changed

    assert asyncio.run(follow()) == ["auth", "auth"]


def test_the_metadata_cache_tells_of_documents_written_by_another_instance(open_repository: Factory) -> None:
    """How consumers learn of retransmission requests."""
    writer, reader = open_repository(), open_repository()

    async def follow() -> list[str]:
        cache = MetadataCache(reader)
        await cache.start()
        changed: list[str] = []

        async def document_changed(key: str) -> None:
            changed.append(key)

        cache.on_document_change("retransmission", document_changed)
        try:
            writer.put_document("subscription-metrics", "g.t$s/node", {"delivered": 1})
            writer.put_document("retransmission", "g.t$s", {"requestedAt": 1})
            writer.delete_document("retransmission", "g.t$s")
            await _until(lambda: len(changed) == 2)
        finally:
            await cache.stop()
        return changed

    assert asyncio.run(follow()) == ["g.t$s", "g.t$s"]


def test_the_metadata_cache_reads_a_change_again_until_the_store_is_reachable(
    open_repository: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change whose entity could not be read (ZooKeeper away) is read again, not lost, and before later ones."""
    writer, reader = open_repository(), open_repository()
    refusals = 3
    get_topic = reader.get_topic

    def away_a_moment(name: TopicName) -> Topic:
        nonlocal refusals
        if refusals:
            refusals -= 1
            raise MetadataUnreachable("ZooKeeper is unreachable", retry_after=1.0)
        return get_topic(name)

    monkeypatch.setattr(reader, "get_topic", away_a_moment)

    async def follow() -> list[str]:
        cache = MetadataCache(reader)
        await cache.start()
        changed: list[str] = []
        cache.on_topic_change(lambda name, _: changed.append(name))
        try:
            _topic(writer)
            writer.create_topic(Topic(TopicName(TOPIC.group, "later")))
            await _until(lambda: len(changed) == 2)
            assert cache.topic(TOPIC.qualified) is not None and refusals == 0
        finally:
            await cache.stop()
        return changed

    assert asyncio.run(follow()) == [TOPIC.qualified, f"{TOPIC.group}.later"]


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


# --- secrets at rest ---

PASSWORD, OAUTH_PASSWORD, CLIENT_SECRET = "endpoint-pass-77", "oauth-pass-77", "client-secret-77"
SIGNING = "whsec_" + base64.b64encode(b"s" * 32).decode()
SECRETS = (PASSWORD, OAUTH_PASSWORD, CLIENT_SECRET, SIGNING)


def _with_secrets(repo: MetadataRepository) -> tuple[Subscription, OAuthProvider]:
    _topic(repo)
    provider = repo.create_oauth_provider(OAuthProvider("auth", "http://auth/token", "client", CLIENT_SECRET))
    subscription = dataclasses.replace(
        _subscription(),
        endpoint=EndpointAddress(f"http://user:{PASSWORD}@service/"),
        oauth_policy=OAuthPolicy("password", "auth", username="u", password=OAUTH_PASSWORD),
        signing_secrets=(SIGNING,),
    )
    return repo.create_subscription(subscription), provider


def _raw(repo: MetadataRepository) -> list[bytes]:
    """What the store holds of subscriptions and OAuth providers, as it lies there."""
    if isinstance(repo, SqliteMetadataRepository):
        db = sqlite3.connect(repo._path)
        try:
            return [
                row[0]
                for table in ("subscriptions", "oauth_providers")
                for row in db.execute(f"SELECT body FROM {table}")
            ]
        finally:
            db.close()
    assert isinstance(repo, ZookeeperMetadataRepository)
    paths = [repo._subscription_path(TOPIC, name) for name in repo._children(repo._topic_path(TOPIC))]
    paths += [repo._path("oauth-providers", name) for name in repo._children(repo._path("oauth-providers"))]
    return [repo._client.get(path)[0] for path in paths]


def _write_raw(repo: MetadataRepository, subscription: bytes, provider: bytes) -> None:
    """Bodies as a version without encryption stored them."""
    if isinstance(repo, SqliteMetadataRepository):
        db = sqlite3.connect(repo._path)
        try:
            db.execute("UPDATE subscriptions SET body = ?", (subscription,))
            db.execute("UPDATE oauth_providers SET body = ?", (provider,))
            db.commit()
        finally:
            db.close()
        return
    assert isinstance(repo, ZookeeperMetadataRepository)
    repo._client.set(repo._subscription_path(TOPIC, "s1"), subscription)
    repo._client.set(repo._path("oauth-providers", "auth"), provider)


def test_stored_secrets_are_encrypted_and_read_back(repo: MetadataRepository, tmp_path: Path) -> None:
    subscription, provider = _with_secrets(repo)
    raw = b"".join(_raw(repo))
    assert b"hermes-sealed:" in raw and not [secret for secret in SECRETS if secret.encode() in raw]
    assert repo.get_subscription(TOPIC, "s1") == subscription and repo.list_oauth_providers() == [provider]
    assert key_file(tmp_path).stat().st_mode & 0o777 == 0o600
    assert repo.reseal_secrets() == 0  # sealed with the current key already


def test_secrets_stored_in_plain_text_still_load_and_are_sealed_by_reseal(repo: MetadataRepository) -> None:
    subscription, provider = _with_secrets(repo)
    plain_subscription = orjson.dumps(api_json.subscription_to_json(subscription, mask_secrets=False))
    _write_raw(repo, plain_subscription, orjson.dumps(api_json.oauth_provider_to_json(provider, mask_secrets=False)))
    assert PASSWORD.encode() in b"".join(_raw(repo))
    assert repo.get_subscription(TOPIC, "s1") == subscription
    assert repo.reseal_secrets() == 2
    raw = b"".join(_raw(repo))
    assert not [secret for secret in SECRETS if secret.encode() in raw]
    assert repo.get_subscription(TOPIC, "s1") == subscription and repo.get_oauth_provider("auth") == provider


def test_a_rotated_key_reseals_and_the_old_one_can_go(open_repository: Factory, tmp_path: Path) -> None:
    writer, reader = open_repository(), open_repository()
    subscription, _ = _with_secrets(writer)
    keys = SecretKeys(key_file(tmp_path))
    old = keys.keys()
    keys.write([Fernet.generate_key(), *old])  # hermes secrets rotate: a new key first, then a reseal
    assert reader.get_subscription(TOPIC, "s1") == subscription  # the old key still reads
    assert open_repository().reseal_secrets() == 2
    keys.write(keys.keys()[:1])  # the old key dropped
    assert reader.get_subscription(TOPIC, "s1") == subscription  # sealed with a key it had not read: re-read
    assert open_repository().reseal_secrets() == 0


def test_reseal_skips_a_stored_body_that_is_no_json_object_and_names_it(
    repo: MetadataRepository, caplog: pytest.LogCaptureFixture
) -> None:
    subscription, provider = _with_secrets(repo)
    _write_raw(  # in plain text: to be sealed
        repo,
        orjson.dumps(api_json.subscription_to_json(subscription, mask_secrets=False)),
        orjson.dumps(api_json.oauth_provider_to_json(provider, mask_secrets=False)),
    )
    repo.create_subscription(_subscription("broken"))
    _store_by_hand(repo, b"{not json", "broken")
    repo.create_oauth_provider(OAuthProvider("listed", "http://auth/token", "client", CLIENT_SECRET))
    if isinstance(repo, SqliteMetadataRepository):
        db = sqlite3.connect(repo._path)
        with contextlib.closing(db), db:
            db.execute("UPDATE oauth_providers SET body = ? WHERE name = 'listed'", (b"[1, 2]",))
    else:
        assert isinstance(repo, ZookeeperMetadataRepository)
        repo._client.set(repo._provider_path("listed"), b"[1, 2]")
    caplog.set_level("WARNING", logger="hermes.metadata.secrets")
    assert repo.reseal_secrets() == 2
    raw = _raw(repo)
    assert b"{not json" in raw and b"[1, 2]" in raw
    assert not [secret for secret in SECRETS if secret.encode() in b"".join(raw)]
    warned = [record.getMessage() for record in caplog.records]
    assert [m for m in warned if f"subscription {TOPIC.qualified}$broken" in m and "no JSON object" in m]
    assert [m for m in warned if "OAuth provider listed" in m and "no JSON object" in m]
    assert repo.get_subscription(TOPIC, "s1") == subscription and repo.get_oauth_provider("auth") == provider


def test_a_process_without_the_key_is_told_what_to_do(open_repository: Factory, tmp_path: Path) -> None:
    _with_secrets(open_repository())
    key_file(tmp_path).write_bytes(Fernet.generate_key() + b"\n")  # another machine's key
    with pytest.raises(MetadataUnavailable, match="does not decrypt with the keys of"):
        open_repository().get_subscription(TOPIC, "s1")
    key_file(tmp_path).unlink()
    with pytest.raises(MetadataUnavailable, match="has no key: copy the key file"):
        open_repository().get_subscription(TOPIC, "s1")


def _store_by_hand(repo: MetadataRepository, body: bytes, subscription: str | None = None) -> None:
    """A body written in the store behind Hermes' back (an older version's, or a hand edit): of the subscription,
    or of TOPIC."""
    if isinstance(repo, SqliteMetadataRepository):
        db = sqlite3.connect(repo._path)
        try:
            if subscription is None:
                db.execute("UPDATE topics SET body = ? WHERE name = ?", (body, TOPIC.qualified))
            else:
                db.execute("UPDATE subscriptions SET body = ? WHERE name = ?", (body, subscription))
            db.commit()
        finally:
            db.close()
        return
    assert isinstance(repo, ZookeeperMetadataRepository)
    path = repo._topic_path(TOPIC) if subscription is None else repo._subscription_path(TOPIC, subscription)
    repo._client.set(path, body)


def _parked_in_key_order(subscription: Subscription) -> bytes:
    """Retry parking with ordering KEY, which validation refuses since parking came."""
    data = api_json.subscription_to_json(subscription, mask_secrets=False)
    data["subscriptionPolicy"].update(ordering="KEY", retryParking={"thresholdMs": 1000})
    return orjson.dumps(data)


def test_a_stored_subscription_that_fails_validation_is_listed_apart_until_a_repair(
    open_repository: Factory, caplog: pytest.LogCaptureFixture
) -> None:
    writer = open_repository()
    _topic(writer)
    good = writer.create_subscription(_subscription("s1"))
    bad = writer.create_subscription(_subscription("s2"))
    _store_by_hand(writer, _parked_in_key_order(bad), "s2")
    reader = open_repository()  # another process, which reads it as stored
    caplog.set_level("WARNING", logger="hermes.metadata.stored")

    assert reader.list_subscriptions() == [good] and reader.list_subscriptions(TOPIC) == [good]
    stored = reader.stored_subscriptions(TOPIC)
    assert stored[0] == good and isinstance(stored[1], StoredEntityInvalid)
    assert stored[1].name == "s2" and stored[1].field == "subscriptionPolicy.retryParking"
    assert stored[1].stored["endpoint"] == "http://user:secret@service/", "read unsealed, to be repaired"
    with pytest.raises(StoredEntityInvalid, match=r"subscriptionPolicy\.retryParking"):
        reader.get_subscription(TOPIC, "s2")
    cache = MetadataCache(reader)

    async def load() -> None:
        await cache.start()
        await cache.stop()

    asyncio.run(load())
    assert list(cache.subscriptions) == [(TOPIC.qualified, "s1")]
    warnings = [r.getMessage() for r in caplog.records if "com.example.orders$s2" in r.getMessage()]
    assert len(warnings) == 1, "one warning per stored content, however often it is read"
    assert "subscriptionPolicy.retryParking" in warnings[0] and "secret" not in warnings[0]

    with pytest.raises(StoredEntityInvalid):  # a change of a subscription it cannot read
        reader.update_subscription(TOPIC, "s2", lambda s: dataclasses.replace(s, description="x"))

    def repair(data: dict[str, object]) -> Subscription:
        policy = {**data["subscriptionPolicy"], "ordering": "NONE"}  # type: ignore[dict-item]
        return api_json.subscription_from_json({**data, "subscriptionPolicy": policy}, TOPIC)

    repaired = reader.update_subscription(TOPIC, "s2", lambda s: s, repair)
    assert reader.get_subscription(TOPIC, "s2") == repaired
    assert repaired.endpoint.credentials == ("user", "secret") and repaired.serial_policy.retry_parking is not None
    assert [s.name for s in writer.list_subscriptions(TOPIC)] == ["s1", "s2"]


def test_a_stored_topic_that_fails_validation_is_listed_apart_and_its_subscriptions_served(
    repo: MetadataRepository,
) -> None:
    topic = _topic(repo)
    subscription = repo.create_subscription(_subscription())
    data = api_json.topic_to_json(topic)
    _store_by_hand(repo, orjson.dumps({**data, "maxMessageSize": 1}))
    assert repo.list_topics() == [] and repo.list_subscriptions() == [subscription]
    (invalid,) = repo.stored_topics()
    assert isinstance(invalid, StoredEntityInvalid) and (invalid.name, invalid.field) == (
        TOPIC.qualified,
        "maxMessageSize",
    )
    _store_by_hand(repo, b"{not json")
    with pytest.raises(StoredEntityInvalid, match=r"cannot be read \(JSONDecodeError\)"):
        repo.get_topic(TOPIC)
    repaired = repo.update_topic(TOPIC, lambda t: t, lambda stored: api_json.topic_from_json({**data, **stored}))
    assert repo.list_topics() == [repaired] and repaired.max_message_size == topic.max_message_size

"""A stored topic or subscription that fails today's validation (stored by an older version, or edited in the store
by hand) stops nothing: Hermes starts, serves the others, shows it as stored, and a PUT corrects it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.topics import KafkaTopics
from hermes.domain import api_json
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Group, Topic
from hermes.metadata.factory import open_repository, sqlite_path
from tests.support.hermes import HermesClient, InProcessHermes, hermes_settings, unique
from tests.support.openapi import conforms_to_openapi
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until


def _store(tmp_path: Path, bootstrap: str, endpoint: str) -> tuple[TopicName, TopicName]:
    """What an older version stored: a topic and subscriptions, one of each invalid today, written by hand."""
    settings = hermes_settings(tmp_path, bootstrap)
    group = unique("g")
    good, bad = TopicName(group, "good"), TopicName(group, "bad")
    repository, admin = open_repository(settings), BrokerAdmin(KafkaConnection.from_settings(settings, bootstrap))
    try:
        repository.create_group(Group(group))
        for topic in (good, bad):
            KafkaTopics(admin, settings.topic_partitions).create(repository.create_topic(Topic(topic)))
        wait_until(lambda: admin.end_offsets(good.qualified))
        for name in ("fine", "parked"):  # as management creates them: pinned at the topic's end
            created = repository.create_subscription(Subscription(good, name, EndpointAddress(f"{endpoint}/{name}")))
            admin.commit_offsets(created.consumer_group_id, good.qualified, admin.end_offsets(good.qualified))
        parked, bad_topic = repository.get_subscription(good, "parked"), repository.get_topic(bad)
    finally:
        repository.close()
    subscription = api_json.subscription_to_json(parked, mask_secrets=False)  # stored before parking's rule
    subscription["subscriptionPolicy"].update(ordering="KEY", retryParking={"thresholdMs": 1000})
    topic = {**api_json.topic_to_json(bad_topic), "maxMessageSize": 1}  # below today's minimum
    db = sqlite3.connect(sqlite_path(settings))
    try:
        db.execute("UPDATE subscriptions SET body = ? WHERE name = 'parked'", (orjson.dumps(subscription),))
        db.execute("UPDATE topics SET body = ? WHERE name = ?", (orjson.dumps(topic), bad.qualified))
        db.commit()
    finally:
        db.close()
    return good, bad


def test_hermes_starts_over_invalid_stored_entities_and_a_put_corrects_them(
    kafka: EmbeddedBroker, tmp_path: Path, subscriber: SubscriberServer, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = subscriber.url.rstrip("/").replace("http://", "http://user:pw-of-parked@")
    good, bad = _store(tmp_path, kafka.bootstrap_servers, endpoint)
    caplog.set_level("WARNING", logger="hermes.metadata.stored")
    hermes = InProcessHermes(hermes_settings(tmp_path, kafka.bootstrap_servers)).start()
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        assert any(
            f"{good.qualified}$parked" in r.getMessage() and "retryParking" in r.getMessage() for r in caplog.records
        )
        hermes.consumer(good.qualified, "fine")
        assert client.publish(good.qualified, '{"n": 1}').status_code == 201
        assert [r.path for r in subscriber.wait_for(1)] == ["/fine"]
        assert (good.qualified, "parked") not in hermes.hermes.supervisor.consumers  # type: ignore[union-attr]

        api = client.management
        assert api.get(f"/topics/{good.qualified}/subscriptions").json() == ["fine", "parked"]
        shown = api.get(f"/topics/{good.qualified}/subscriptions/parked")
        assert shown.status_code == 200 and shown.json()["invalid"]["field"] == "subscriptionPolicy.retryParking"
        assert shown.json()["subscriptionPolicy"]["ordering"] == "KEY" and "pw-of-parked" not in shown.text
        conforms_to_openapi("/topics/{topic}/subscriptions/{subscription}", "get", shown)
        state = api.put(f"/topics/{good.qualified}/subscriptions/parked/state", json="SUSPENDED")
        assert state.status_code == 400 and state.json()["code"] == "STORED_ENTITY_INVALID"
        conforms_to_openapi("/topics/{topic}/subscriptions/{subscription}/state", "put", state)
        assert api.get("/topics", params={"groupName": good.group}).json() == [bad.qualified, good.qualified]
        shown = api.get(f"/topics/{bad.qualified}")
        assert shown.json()["invalid"]["field"] == "maxMessageSize"
        conforms_to_openapi("/topics/{topic}", "get", shown)
        assert client.publish(bad.qualified, "{}").status_code == 404

        fixed = api.put(
            f"/topics/{good.qualified}/subscriptions/parked", json={"subscriptionPolicy": {"ordering": "NONE"}}
        )
        assert fixed.status_code == 200, fixed.text
        assert "invalid" not in fixed.json() and fixed.json()["subscriptionPolicy"]["retryParking"] == {
            "thresholdMs": 1000
        }
        hermes.consumer(good.qualified, "parked")
        assert client.publish(good.qualified, '{"n": 2}').status_code == 201
        # the repaired subscription delivers what was published while it was invalid: its offsets stayed
        received = subscriber.wait_for(4)
        assert sorted((r.path, orjson.loads(r.body)["n"]) for r in received) == [
            ("/fine", 1),
            ("/fine", 2),
            ("/parked", 1),
            ("/parked", 2),
        ]
        assert next(r for r in received if r.path == "/parked").headers["Authorization"].startswith("Basic ")

        assert api.put(f"/topics/{bad.qualified}", json={"maxMessageSize": 10240}).status_code == 200
        assert "invalid" not in api.get(f"/topics/{bad.qualified}").json()
        wait_until(lambda: client.publish(bad.qualified, "{}").status_code == 201, timeout=10)
    finally:
        client.close()
        hermes.stop()

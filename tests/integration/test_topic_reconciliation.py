"""A topic the broker lost (a new or wiped cluster, a deleted Kafka topic) is created again with its settings, and
nothing published to it meanwhile is lost."""

from __future__ import annotations

from typing import Any

import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.topics import IDEMPOTENCY, KafkaTopics
from hermes.domain.names import TopicName
from hermes.domain.topic import RetentionTime, RetentionUnit, Topic
from hermes.domain.trace import TRACKING_TOPIC
from hermes.offload.discovery import METADATA_TOPIC
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes, unique
from tests.support.subscriber import SubscriberServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"topic_reconcile_interval": 0.5, "topic_partitions": 3}


def test_a_lost_kafka_topic_is_created_again_and_no_accepted_message_is_lost(
    kafka: EmbeddedBroker, client: HermesClient, subscriber: SubscriberServer
) -> None:
    admin = BrokerAdmin(KafkaConnection(kafka.bootstrap_servers))
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url)
    assert client.publish(topic, '{"n": 0}').status_code in (201, 202)
    subscriber.wait_for(1)

    admin.delete_topic(topic)
    accepted = []
    for n in range(1, 6):
        response = client.publish(topic, f'{{"n": {n}}}')
        assert response.status_code in (201, 202), response.text
        accepted.append(response.headers["Hermes-Message-Id"])

    delivered = lambda: {r.message_id for r in subscriber.received}  # noqa: E731
    wait_until(lambda: set(accepted) <= delivered(), timeout=60)
    assert len(admin.partitions(topic)) == 3, "created again with Hermes' partitions, not auto-created"


def test_reconciling_creates_only_what_is_missing_with_the_topic_settings(kafka: EmbeddedBroker) -> None:
    admin = BrokerAdmin(KafkaConnection(kafka.bootstrap_servers))
    present, missing = (
        Topic(TopicName("reconcile", unique("t")), retention_time=RetentionTime(2, RetentionUnit.HOURS))
        for _ in range(2)
    )
    topics = KafkaTopics(admin, partitions=2)
    topics.create(present)
    assert topics.reconcile([present, missing]) == [missing.qualified_name]
    # the broker's metadata may lag the creation a moment
    wait_until(lambda: len(admin.partitions(missing.qualified_name)) == 2, timeout=10)
    assert admin.topic_config(missing.qualified_name)["retention.ms"] == str(2 * 3600 * 1000)
    assert topics.reconcile([present, missing]) == []


def test_an_update_grows_the_partitions_to_the_configured_count(kafka: EmbeddedBroker) -> None:
    admin = BrokerAdmin(KafkaConnection(kafka.bootstrap_servers))
    topic = Topic(TopicName("reconcile", unique("t")))
    KafkaTopics(admin, partitions=1).create(topic)
    KafkaTopics(admin, partitions=4).update(topic)
    wait_until(lambda: len(admin.partitions(topic.qualified_name)) == 4, timeout=10)


def test_hermes_own_topics_are_no_inconsistency_refuse_deletion_and_come_back_after_a_kafka_admin_deletes_them(
    kafka: EmbeddedBroker, hermes: InProcessHermes, client: HermesClient
) -> None:
    admin = BrokerAdmin(KafkaConnection(kafka.bootstrap_servers))
    advertised = admin.last_value(METADATA_TOPIC)
    assert advertised is not None, "the frontend advertises the offload service at its start"
    internal = (METADATA_TOPIC, TRACKING_TOPIC, IDEMPOTENCY.name)

    listed = client.management.get("/consistency/inconsistencies/topics").json()
    assert not set(internal) & set(listed), listed
    for name in internal:
        refused = client.management.delete("/consistency/inconsistencies/topics", params={"topicName": name})
        assert refused.status_code == 403, refused.text
        assert name in refused.json()["message"] and "Hermes itself owns" in refused.json()["message"]
        assert client.management.delete(f"/topics/{name}").status_code == 403
        created = client.management.post(
            "/topics", json={"name": name, "description": "d", "owner": {"source": "Plaintext", "id": "t"}}
        )
        assert created.status_code == 403, created.text
    assert set(internal) <= admin.topic_names()

    for name in internal:  # what the API refuses, a Kafka admin can do
        admin.delete_topic(name)
    wait_until(lambda: set(internal) <= admin.topic_names(), timeout=30)
    # an empty discovery topic would advertise nothing: the frontend advertises again
    wait_until(lambda: admin.last_value(METADATA_TOPIC) == advertised, timeout=30)
    assert admin.topic_config(METADATA_TOPIC)["retention.ms"] == "-1"
    assert admin.topic_config(IDEMPOTENCY.name)["retention.ms"] == str(7 * 86400 * 1000)

"""Deleting a topic, as Hermes does: its subscriptions go with it only when every one of them allows it."""

from __future__ import annotations

import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from tests.support.hermes import HermesClient

pytestmark = pytest.mark.integration


def test_subscriptions_with_auto_delete_go_with_their_topic_and_others_keep_it(
    kafka: EmbeddedBroker, client: HermesClient
) -> None:
    topic = client.create_topic()
    first = client.create_subscription(topic, "http://127.0.0.1:9/", autoDeleteWithTopicEnabled=True)
    kept = client.create_subscription(topic, "http://127.0.0.1:9/")
    refused = client.management.delete(f"/topics/{topic}")
    assert refused.status_code == 403 and refused.json()["code"] == "TOPIC_NOT_EMPTY"
    assert client.management.get(f"/topics/{topic}/subscriptions").json() == sorted([first, kept])

    assert client.management.delete(f"/topics/{topic}/subscriptions/{kept}").status_code == 200
    assert client.management.delete(f"/topics/{topic}").status_code == 200
    assert client.management.get(f"/topics/{topic}").status_code == 404
    assert not BrokerAdmin(KafkaConnection(kafka.bootstrap_servers)).topic_exists(topic)
    client.create_topic(topic)  # the same name again: the auto-deleted subscription is gone, not inherited
    assert client.management.get(f"/topics/{topic}/subscriptions").json() == []

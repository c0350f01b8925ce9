"""A message as large as its topic's maxMessageSize is accepted by the broker too: Kafka's limit counts the record
batch (headers and framing included), so the Kafka topic leaves room for them."""

from __future__ import annotations

import pytest

from tests.support.hermes import HermesClient
from tests.support.subscriber import SubscriberServer

pytestmark = pytest.mark.integration


def test_a_message_of_exactly_max_message_size_is_stored_and_delivered(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic(maxMessageSize=1024)
    client.create_subscription(topic, subscriber.url)
    body = '{"x": "' + "a" * (1024 - 9) + '"}'
    assert len(body) == 1024
    response = client.publish(topic, body, headers={"Trace-Id": "t" * 200})
    assert response.status_code in (201, 202), response.text
    [received] = subscriber.wait_for(1, timeout=30)
    assert received.body == body.encode()

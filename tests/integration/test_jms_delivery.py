"""``jms://`` endpoints against a real ActiveMQ (the session's ``activemq`` fixture), read back by a real STOMP
consumer: a queue and a topic, the headers as JMS properties, a BATCH as one message, retries while the broker is
down (at-least-once), a refused login and a refused destination (retried, traced, recorded), the endpoint's
password kept out of answers, logs and metrics, bad URLs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from hermes.consumers.rate import RateMode
from tests.conftest import wait_until
from tests.integration.test_tracking import TrackingReader
from tests.support.activemq import FORBIDDEN, PASSWORD, ActiveMqServer, StompReader
from tests.support.hermes import HermesClient, InProcessHermes, unique

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    # a broker that comes back is tried again within a second, not at the heartbeat mode's once a minute
    return {"consumer_rate_period": 0.2, "consumer_heartbeat_interval": 1.0, "consumer_failure_log_interval": 0.5}


@pytest.fixture
def reader(activemq: ActiveMqServer) -> Iterator[Any]:
    readers: list[StompReader] = []

    def read(destination: str) -> StompReader:
        readers.append(StompReader(activemq, destination))
        return readers[-1]

    yield read
    for r in readers:
        r.close()


def test_a_queue_gets_each_message_with_its_headers_as_properties(
    hermes: InProcessHermes, client: HermesClient, activemq: ActiveMqServer, reader: Any
) -> None:
    queue = unique("orders")
    messages = reader(f"/queue/{queue}")
    topic = client.create_topic()
    name = client.create_subscription(
        topic,
        activemq.endpoint(f"queue/{queue}"),
        headers=[{"name": "X-Tenant", "value": "acme"}],
        subscriptionIdentityHeadersEnabled=True,
    )
    hermes.consumer(topic, name)
    published = client.publish(topic, '{"order": 1}', headers={"Trace-Id": "trace-1"})
    assert published.status_code == 201, published.text

    [message] = messages.wait_for(1)
    assert message.body == b'{"order": 1}'
    headers = message.headers
    assert headers["HermesMessageId"] == published.headers["Hermes-Message-Id"]
    assert headers["HermesTopicName"] == topic
    assert headers["HermesSubscriptionName"] == name
    assert headers["HermesRetryCount"] == "0"
    assert headers["TraceId"] == "trace-1"
    assert headers["XTenant"] == "acme"
    assert headers["content-type"] == "application/json"
    assert headers["persistent"] == "true"
    metrics = hermes.consumer(topic, name).metrics.totals
    wait_until(lambda: metrics.get("delivered") == 1)
    assert metrics.get("codes2xx") == 1


def test_a_topic_as_hermes_names_it_and_a_batch_as_one_message(
    hermes: InProcessHermes, client: HermesClient, activemq: ActiveMqServer, reader: Any
) -> None:
    destination = unique("offerWatched")
    on_topic = reader(f"/topic/{destination}")
    topic = client.create_topic()
    client.create_subscription(topic, activemq.endpoint(destination))  # Hermes' form: a JMS topic
    batched = client.create_subscription(
        topic,
        activemq.endpoint(f"topic/{destination}"),
        deliveryType="BATCH",
        subscriptionPolicy={"batchSize": 2, "batchTime": 60_000, "batchVolume": 64 * 1024, "requestTimeout": 5000},
    )
    hermes.consumer(topic, batched)
    client.publish(topic, '{"n": 1}')
    client.publish(topic, '{"n": 2}')

    received = on_topic.wait_for(3)
    singles = sorted(m.body for m in received if "HermesBatchId" not in m.headers)
    [batch] = [m for m in received if "HermesBatchId" in m.headers]
    assert singles == [b'{"n": 1}', b'{"n": 2}']
    assert sorted(e["n"] for e in json.loads(batch.body)) == [1, 2]  # partitions, so in any order
    assert "HermesMessageId" not in batch.headers


def test_messages_wait_for_a_broker_that_is_down_and_arrive_when_it_is_back(
    hermes: InProcessHermes, client: HermesClient, activemq: ActiveMqServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    queue = unique("payments")
    topic = client.create_topic()
    name = client.create_subscription(topic, activemq.endpoint(f"queue/{queue}"))
    consumer = hermes.consumer(topic, name)
    metrics = consumer.metrics.totals
    activemq.stop()
    try:
        for n in range(3):
            assert client.publish(topic, json.dumps({"n": n})).status_code == 201
        wait_until(lambda: metrics.get("otherErrors", 0) >= 3, timeout=30)
        wait_until(lambda: consumer.rate.mode is not RateMode.NORMAL)  # slowed down, as for a failing HTTP one
        assert metrics.get("delivered", 0) == 0
    finally:
        activemq.start()
    wait_until(lambda: metrics.get("delivered", 0) == 3, timeout=60)
    messages = StompReader(activemq, f"/queue/{queue}")  # the queue kept them
    try:
        received = messages.wait_for(3)
    finally:
        messages.close()
    assert sorted(json.loads(m.body)["n"] for m in received) == [0, 1, 2]
    assert any(int(m.headers["HermesRetryCount"]) > 0 for m in received)
    assert f"cannot connect to the JMS broker at 127.0.0.1:{activemq.port}" in caplog.text
    assert PASSWORD not in caplog.text


def test_a_refused_login_is_retried_and_its_password_shown_nowhere(
    hermes: InProcessHermes, client: HermesClient, activemq: ActiveMqServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "not-the-amq-password"
    topic = client.create_topic()
    name = client.create_subscription(
        topic, activemq.endpoint(f"queue/{unique('refused')}", wrong), subscriptionPolicy={"messageTtl": 2}
    )
    path = f"/topics/{topic}/subscriptions/{name}"
    assert wrong not in client.management.get(path).text
    assert client.management.get(path).json()["endpoint"].startswith("jms://hermes:*****@")
    client.publish(topic, '{"n": 1}')

    undelivered = client.management.get
    wait_until(lambda: undelivered(f"{path}/undelivered/last").status_code == 200, timeout=30)
    reason = undelivered(f"{path}/undelivered/last").json()["reason"]
    assert "refused" in reason and "hermes" in reason, reason
    assert hermes.consumer(topic, name).metrics.totals.get("otherErrors", 0) >= 2  # retried until the TTL
    assert wrong not in caplog.text
    assert wrong not in client.management.get(f"{path}/metrics").text
    assert wrong not in client.management.get("/status/prometheus").text


def test_a_destination_the_broker_refuses_is_retried_until_the_ttl_and_others_go_on(
    hermes: InProcessHermes, client: HermesClient, activemq: ActiveMqServer, reader: Any
) -> None:
    topic = client.create_topic(trackingEnabled=True)
    refused = client.create_subscription(
        topic, activemq.endpoint(FORBIDDEN), subscriptionPolicy={"messageTtl": 2}, trackingMode="trackingAll"
    )
    queue = unique("allowed")
    allowed = reader(f"/queue/{queue}")
    name = client.create_subscription(topic, activemq.endpoint(f"queue/{queue}"), trackingMode="trackingAll")
    hermes.consumer(topic, refused)
    message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]

    path = f"/topics/{topic}/subscriptions/{refused}/undelivered/last"
    wait_until(lambda: client.management.get(path).status_code == 200, timeout=30)
    reason = client.management.get(path).json()["reason"]
    assert reason.startswith(f"Message sending failed: the JMS broker at 127.0.0.1:{activemq.port} refused: "), reason
    assert "forbidden.orders" in reason, reason
    assert hermes.consumer(topic, refused).metrics.totals.get("otherErrors", 0) >= 2  # retried until the TTL
    client.publish(topic, '{"n": 2}')
    assert sorted(m.body for m in allowed.wait_for(2)) == [b'{"n": 1}', b'{"n": 2}']
    tracking = TrackingReader(hermes)  # traced as an HTTP subscriber's deliveries are
    try:
        wait_until(lambda: tracking.statuses(message_id, name) == ["INFLIGHT", "SUCCESS"], 20, 0.2)
        traced = tracking.statuses(message_id, refused)
        assert traced[0] == "INFLIGHT" and traced[-1] == "DISCARDED" and "FAILED" in traced, traced
    finally:
        tracking.close()


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("jms://127.0.0.1:61613/a/b", "must name one destination"),
        ("jms://127.0.0.1:61613/queue/", "must name one destination"),
        ("jms://127.0.0.1:61613", "must name one destination"),
        ("jms://127.0.0.1:61613/queue/a%20b", "destination name 'a%20b'"),
        ("jms://127.0.0.1:61613/orders?x=1", "no query or fragment"),
        ("jms://:61613/orders", "must name a host"),
    ],
)
def test_a_bad_jms_url_is_refused_with_400(client: HermesClient, endpoint: str, problem: str) -> None:
    topic = client.create_topic()
    response = client.management.post(
        f"/topics/{topic}/subscriptions",
        json={"topicName": topic, "name": "s", "endpoint": endpoint, "owner": {"source": "Plaintext", "id": "t"}},
    )
    assert response.status_code == 400, response.text
    assert response.json()["message"].startswith("endpoint: "), response.text
    assert problem in response.json()["message"]


def test_http_only_features_are_refused_with_a_jms_endpoint(client: HermesClient) -> None:
    topic = client.create_topic()
    response = client.management.post(
        f"/topics/{topic}/subscriptions",
        json={
            "topicName": topic,
            "name": "s",
            "endpoint": "jms://127.0.0.1:61613/queue/orders",
            "owner": {"source": "Plaintext", "id": "t"},
            "signingSecrets": ["whsec_" + "A" * 44],
        },
    )
    assert response.status_code == 400, response.text
    assert response.json()["message"] == "signingSecrets: is not available with a jms:// endpoint"

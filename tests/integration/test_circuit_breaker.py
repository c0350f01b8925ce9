"""Circuit breaking (``circuitBreaker``) against the real broker and real subscribers that fail, then recover."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Received, Reply, SubscriberServer

pytestmark = pytest.mark.integration

PROBE_INTERVAL_MS = 500
BREAKER = {"consecutiveFailures": 3, "probeInterval": PROBE_INTERVAL_MS}
POLICIES = {
    "SERIAL": {"messageBackoff": 50, "messageTtl": 60, "inflightSize": 5, "requestTimeout": 10_000},
    "BATCH": {"messageBackoff": 50, "messageTtl": 60, "batchSize": 5, "batchTime": 200, "requestTimeout": 10_000},
}


class Recovering:
    """A subscriber answering 500 until ``recover``, then 200; ``delivered``: the messages answered 200."""

    def __init__(self) -> None:
        self.failing = True
        self.delivered: list[Any] = []
        self.server = SubscriberServer(self._reply).start()

    def _reply(self, _n: int, request: Received) -> Reply:
        if self.failing:
            return Reply(500)
        body = json.loads(request.body)
        self.delivered.extend(body if isinstance(body, list) else [body])
        return Reply(200)

    def recover(self) -> None:
        self.failing = False


@pytest.fixture
def recovering() -> Iterator[Recovering]:
    subscriber = Recovering()
    yield subscriber
    subscriber.server.stop()


def _breaker(client: HermesClient, topic: str, name: str) -> dict[str, Any]:
    response = client.management.get(f"/topics/{topic}/subscriptions/{name}/circuit-breaker")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def _problems(client: HermesClient, topic: str, name: str) -> list[str]:
    health = client.management.get(f"/topics/{topic}/subscriptions/{name}/health").json()
    return [problem["code"] for problem in health["problems"]]


@pytest.mark.parametrize("delivery", ["SERIAL", "BATCH"])
def test_a_failing_endpoint_opens_the_breaker_gets_only_probes_then_closes_and_gets_everything(
    client: HermesClient, hermes: InProcessHermes, recovering: Recovering, delivery: str
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(
        topic,
        recovering.server.url,
        deliveryType=delivery,
        subscriptionPolicy=POLICIES[delivery],
        circuitBreaker=BREAKER,
        monitoringDetails={"severity": "CRITICAL"},
    )
    consumer = hermes.consumer(topic, name)
    for n in range(5):
        assert client.publish(topic, json.dumps({"n": n})).status_code == 201
    wait_until(lambda: _breaker(client, topic, name)["state"] != "CLOSED", timeout=20)
    opened = len(recovering.server.received)
    recovering.server.wait_for(opened + 3, timeout=20)  # three probes
    probes = recovering.server.received[opened:]
    gaps = [b.at - a.at for a, b in itertools.pairwise(probes)]
    # one attempt per interval: without the breaker, a backoff of 50 ms would have sent dozens meanwhile
    assert min(gaps) >= PROBE_INTERVAL_MS / 1000 * 0.8, gaps
    assert opened <= 3 + 5  # the failures that opened it, and the attempts already under way then
    state = _breaker(client, topic, name)
    assert state["enabled"] and state["nodes"][0]["opened"] == 1 and "in a row failed" in state["nodes"][0]["reason"]
    assert "CIRCUIT_OPEN" in _problems(client, topic, name)
    unhealthy = client.management.get("/unhealthy").json()
    assert any(u["name"] == name and "CIRCUIT_OPEN" in str(u["problems"]) for u in unhealthy)
    labels = {"topic": topic, "subscription": name}
    assert REGISTRY.get_sample_value("hermes_consumers_circuit_breaker_opened_total", labels) == 1
    assert REGISTRY.get_sample_value("hermes_consumers_circuit_breaker_state", labels) in (1, 2)

    recovering.recover()
    wait_until(lambda: consumer.metrics.totals["delivered"] == 5, timeout=20)
    assert sorted(m["n"] for m in recovering.delivered) == list(range(5))
    wait_until(lambda: _breaker(client, topic, name)["state"] == "CLOSED", timeout=10)
    assert consumer.metrics.totals["discarded"] == 0
    wait_until(lambda: "CIRCUIT_OPEN" not in _problems(client, topic, name), timeout=10)
    assert REGISTRY.get_sample_value("hermes_consumers_circuit_breaker_state", labels) == 0


def test_the_setting_is_validated_on_create_and_update_naming_the_field_and_absent_unless_set(
    client: HermesClient,
) -> None:
    topic = client.create_topic()
    refused = client.management.post(
        f"/topics/{topic}/subscriptions",
        json={"name": "s", "endpoint": "http://x/", "circuitBreaker": {"failureRatio": 2}},
    )
    assert refused.status_code == 400 and refused.json()["message"].startswith("circuitBreaker.failureRatio: ")
    name = client.create_subscription(topic, "http://x/")
    path = f"/topics/{topic}/subscriptions/{name}"
    assert "circuitBreaker" not in client.management.get(path).json()
    assert client.management.get(f"{path}/circuit-breaker").json() == {"enabled": False, "state": "CLOSED", "nodes": []}
    changed = client.management.put(path, json={"circuitBreaker": {"consecutiveFailures": 5}})
    assert changed.status_code == 200 and "Hermes-Ignored-Fields" not in changed.headers
    assert client.management.put(path, json={"description": "kept"}).status_code == 200
    assert client.management.get(path).json()["circuitBreaker"]["consecutiveFailures"] == 5
    wrong = client.management.put(path, json={"circuitBreaker": {"probeInterval": 10}})
    assert wrong.status_code == 400, wrong.text
    assert wrong.json()["message"] == "circuitBreaker.probeInterval: must be at least 100"
    assert client.management.put(path, json={"circuitBreaker": None}).status_code == 200
    assert "circuitBreaker" not in client.management.get(path).json()


def test_messages_waiting_behind_an_open_breaker_survive_their_consumer_stopping(
    client: HermesClient, hermes: InProcessHermes, recovering: Recovering
) -> None:
    topic = client.create_topic()
    policy = POLICIES["SERIAL"]
    name = client.create_subscription(topic, recovering.server.url, subscriptionPolicy=policy, circuitBreaker=BREAKER)
    hermes.consumer(topic, name)
    for n in range(5):
        assert client.publish(topic, json.dumps({"n": n})).status_code == 201
    wait_until(lambda: _breaker(client, topic, name)["state"] != "CLOSED", timeout=20)
    started = time.monotonic()
    hermes.suspend(client, topic, name)  # the waiting deliveries are not waited for: they stay uncommitted
    assert time.monotonic() - started < 5  # the stop's drain timeout: nothing sending held it
    recovering.recover()
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: sorted({m["n"] for m in recovering.delivered}) == list(range(5)), timeout=20)


def test_each_state_change_is_an_event_on_hermes_own_topic_that_anyone_subscribes_to_and_nobody_publishes_to(
    client: HermesClient, hermes: InProcessHermes, recovering: Recovering, subscriber: SubscriberServer
) -> None:
    events = client.create_subscription("hermes.subscription-events", subscriber.url)
    hermes.consumer("hermes.subscription-events", events)
    refused = client.publish("hermes.subscription-events", '{"event": "circuitBreakerClosed"}')
    assert refused.status_code == 403, refused.text
    topic = client.create_topic()
    name = client.create_subscription(
        topic, recovering.server.url, subscriptionPolicy=POLICIES["SERIAL"], circuitBreaker=BREAKER
    )
    hermes.consumer(topic, name)
    assert client.publish(topic, '{"n": 0}').status_code == 201

    def of_it() -> list[dict[str, Any]]:
        return [e for e in (json.loads(r.body) for r in subscriber.received) if e["subscription"] == name]

    wait_until(lambda: [e["state"] for e in of_it()][:3] == ["OPEN", "HALF_OPEN", "OPEN"], timeout=20)
    recovering.recover()
    wait_until(lambda: of_it()[-1]["state"] == "CLOSED", timeout=20)
    opened, closed = of_it()[0], of_it()[-1]
    assert opened["event"] == "circuitBreakerOpened" and opened["previousState"] == "CLOSED"
    assert opened["topicName"] == topic and opened["reason"] == "3 attempts in a row failed"
    assert opened["node"] == hermes.hermes.settings.node_id and opened["time"] <= closed["time"]
    assert closed["event"] == "circuitBreakerClosed" and closed["previousState"] == "HALF_OPEN"
    assert all(r.headers.get("Hermes-Message-Id") for r in subscriber.received)


def test_hermes_own_events_topic_cannot_be_deleted(client: HermesClient) -> None:
    deleted = client.management.delete("/topics/hermes.subscription-events")
    assert deleted.status_code == 403 and "hermes.subscription-events" in deleted.json()["message"], deleted.text
    assert client.management.delete("/groups/hermes").status_code == 403
    assert client.management.get("/topics/hermes.subscription-events").status_code == 200


def test_a_breaker_open_for_suspend_after_suspends_the_subscription_and_says_so_and_a_resume_delivers_everything(
    client: HermesClient, hermes: InProcessHermes, recovering: Recovering, subscriber: SubscriberServer
) -> None:
    events = client.create_subscription("hermes.subscription-events", subscriber.url)
    hermes.consumer("hermes.subscription-events", events)
    topic = client.create_topic()
    name = client.create_subscription(
        topic,
        recovering.server.url,
        subscriptionPolicy=POLICIES["SERIAL"],
        circuitBreaker={**BREAKER, "suspendAfter": 1500},
    )
    hermes.consumer(topic, name)
    for n in range(3):
        assert client.publish(topic, json.dumps({"n": n})).status_code == 201
    state = f"/topics/{topic}/subscriptions/{name}/state"
    wait_until(lambda: client.management.get(state).json() == "SUSPENDED", timeout=20)
    supervisor = hermes.hermes.supervisor
    assert supervisor is not None
    wait_until(lambda: (topic, name) not in supervisor.consumers, timeout=20)

    def suspensions() -> list[dict[str, Any]]:
        received = (json.loads(r.body) for r in subscriber.received)
        return [e for e in received if e["subscription"] == name and e["event"] == "subscriptionSuspended"]

    wait_until(suspensions, timeout=20)
    [suspended] = suspensions()
    assert suspended["state"] == "SUSPENDED" and suspended["previousState"] in ("OPEN", "HALF_OPEN")
    assert suspended["reason"].startswith("the circuit breaker stayed open for 1500 ms")
    recovering.recover()
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: sorted({m["n"] for m in recovering.delivered}) == list(range(3)), timeout=20)

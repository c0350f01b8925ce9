"""Operations API against real traffic: metrics, last undelivered message, retransmission, health."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from hermes.broker.admin import RETRANSMISSION_NOTE, SHARED_READER, BrokerAdmin
from hermes.broker.embedded import free_port
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Reply, SubscriberServer

pytestmark = pytest.mark.integration
JSON = {"Content-Type": "application/json"}


def _metrics(client: HermesClient, topic: str, sub: str) -> dict[str, Any]:
    response = client.management.get(f"/topics/{topic}/subscriptions/{sub}/metrics")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_metrics_count_real_deliveries(client: HermesClient) -> None:
    subscriber = SubscriberServer(lambda n, _r: Reply(200 if n % 2 == 0 else 400)).start()
    try:
        topic = client.create_topic()
        name = client.create_subscription(topic, subscriber.url, subscriptionPolicy={"requestTimeout": 10_000})
        for i in range(6):
            client.publish(topic, f'{{"n": {i}}}')
        subscriber.wait_for(6, timeout=20)
        wait_until(lambda: _metrics(client, topic, name)["totals"]["codes4xx"] == 3, 10)
        wait_until(lambda: _metrics(client, topic, name)["discarded"] == 3, 10)
        metrics = _metrics(client, topic, name)
        assert metrics["delivered"] == 3, "a 4xx without retryClientErrors discards the message, as in Hermes"
        assert metrics["totals"]["codes2xx"] == 3
        wait_until(lambda: _metrics(client, topic, name)["lag"] == "0", 10)  # Hermes' MetricLongValue: a string
        topic_metrics = client.management.get(f"/topics/{topic}/metrics").json()
        assert topic_metrics["published"] == 6 and topic_metrics["delivered"] == 3
        health = client.management.get(f"/topics/{topic}/subscriptions/{name}/health").json()
        assert health["status"] == "UNHEALTHY", "half of its answers are 4xx"
        assert [p["code"] for p in health["problems"]] == ["RECEIVING_MALFORMED_MESSAGES"]
    finally:
        subscriber.stop()


def test_the_metrics_stop_naming_a_node_as_soon_as_it_stops_the_consumer(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    """A stopped consumer's last snapshot is 30 s fresh: without its stopped mark, the node stayed listed that long."""
    topic = client.create_topic()
    name = client.create_subscription(topic, f"{subscriber.url}{topic}")
    message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]
    wait_until(lambda: message_id in {r.message_id for r in subscriber.received}, 20)
    wait_until(lambda: _metrics(client, topic, name)["delivered"] == 1, 10)
    assert len(_metrics(client, topic, name)["nodes"]) == 1
    client.set_state(topic, name, "SUSPENDED")
    wait_until(lambda: _metrics(client, topic, name)["nodes"] == [], 10)
    assert _metrics(client, topic, name)["delivered"] == 1  # its totals count on


def test_last_undelivered_message(client: HermesClient) -> None:
    subscriber = SubscriberServer(lambda n, _r: Reply(503)).start()
    try:
        topic = client.create_topic()
        name = client.create_subscription(
            topic, subscriber.url, subscriptionPolicy={"messageTtl": 1, "messageBackoff": 300}
        )
        path = f"/topics/{topic}/subscriptions/{name}/undelivered/last"
        assert client.management.get(path).status_code == 404
        client.publish(topic, '{"lost": 1}')
        wait_until(lambda: client.management.get(path).status_code == 200, 15)
        record = client.management.get(path).json()
        assert record["message"] == '{"lost": 1}' and record["status"] == "DISCARDED"
        assert record["reason"] == "Message sending failed with status code:503"
        assert {"timestamp", "partition", "offset", "cluster", "subscription", "topicName"} <= set(record)
        wait_until(lambda: _metrics(client, topic, name)["discarded"] == 1, 10)
    finally:
        subscriber.stop()


def _two_waves(client: HermesClient, topic: str, subscriber: SubscriberServer) -> tuple[datetime, set[bytes]]:
    first = {f'{{"wave": 1, "n": {i}}}'.encode() for i in range(6)}
    for body in first:
        client.publish(topic, body)
    wait_until(lambda: first <= {r.body for r in subscriber.received}, 20)
    time.sleep(0.3)
    between = datetime.now(UTC)
    time.sleep(0.3)
    second = {f'{{"wave": 2, "n": {i}}}'.encode() for i in range(6)}
    for body in second:
        client.publish(topic, body)
    wait_until(lambda: second <= {r.body for r in subscriber.received}, 20)
    time.sleep(0.3)  # no stragglers of either wave are still on their way
    return between, second


def _retransmit(client: HermesClient, topic: str, sub: str, moment: datetime) -> dict[str, Any]:
    response = client.management.put(
        f"/topics/{topic}/subscriptions/{sub}/retransmission", json={"retransmissionDate": moment.isoformat()}
    )
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


PATIENT = {"requestTimeout": 10_000}  # a slow answer under load must not cause a (legitimate) duplicate


def _bodies_after(subscriber: SubscriberServer, index: int) -> set[bytes]:
    return {r.body for r in subscriber.received[index:]}


def test_retransmission_of_an_active_subscription(client: HermesClient, subscriber: SubscriberServer) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=PATIENT)
    between, second = _two_waves(client, topic, subscriber)
    delivered = len(subscriber.received)
    summary = _retransmit(client, topic, name, between)
    partitions = summary["partitionOffsetListPerBrokerName"]["primary"]
    assert len(partitions) == 2 and sum(p["offset"] for p in partitions) == 6
    wait_until(lambda: _bodies_after(subscriber, delivered) == second, 20)
    time.sleep(0.5)
    assert _bodies_after(subscriber, delivered) == second, "every message after the date again, none before"


def test_retransmission_of_a_suspended_subscription_takes_effect_on_activation(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=PATIENT)
    between, second = _two_waves(client, topic, subscriber)
    state = f"/topics/{topic}/subscriptions/{name}/state"
    assert client.management.put(state, content='"SUSPENDED"', headers=JSON).status_code == 200
    supervisor = hermes.hermes.supervisor
    assert supervisor is not None
    wait_until(lambda: (topic, name) not in supervisor.consumers, timeout=20)  # it left the group
    delivered = len(subscriber.received)
    assert (
        client.management.post(
            f"/topics/{topic}/subscriptions/{name}/retransmission", content=between.isoformat(), headers=JSON
        ).status_code
        == 200
    )
    time.sleep(0.5)
    assert len(subscriber.received) == delivered, "nothing is sent while suspended"
    assert client.management.put(state, content='"ACTIVE"', headers=JSON).status_code == 200
    wait_until(lambda: _bodies_after(subscriber, delivered) == second, 30)
    time.sleep(0.5)
    assert _bodies_after(subscriber, delivered) == second, "every message after the date again, none before"


def test_a_retransmission_overwritten_by_a_stopping_consumers_commit_is_applied_when_it_starts(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    """Hermes #1618 during a restart: the stopping consumer's last commit (its offsets, noting the retransmission
    it applied last) lands after management's commit of the request; the next consumer applies the request."""
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=PATIENT)
    for n in range(3):
        client.publish(topic, f'{{"n": {n}}}')
    subscriber.wait_for(3, timeout=20)
    supervisor = hermes.hermes.supervisor
    assert supervisor is not None
    group = f"hermes_{topic}_{name}"
    admin = BrokerAdmin(hermes.hermes.connection)
    wait_until(lambda: sum(admin.committed_offsets(group, topic).values()) == 3, 10)
    stale = admin.committed(group, topic)  # what the stopping consumer commits: these offsets and their note
    assert all(RETRANSMISSION_NOTE in metadata for _, metadata in stale.values())
    state = f"/topics/{topic}/subscriptions/{name}/state"
    assert client.management.put(state, content='"SUSPENDED"', headers=JSON).status_code == 200
    wait_until(lambda: (topic, name) not in supervisor.consumers, timeout=20)
    response = client.management.put(
        f"/topics/{topic}/subscriptions/{name}/retransmission", json={"retransmissionDate": "-1h"}
    )
    assert response.status_code == 200, response.text
    assert sum(admin.committed_offsets(group, topic).values()) == 0
    committed = threading.Event()
    offsets = {(topic, p): offset for p, (offset, _) in stale.items()}
    notes = {(topic, p): metadata[metadata.index(RETRANSMISSION_NOTE) :] for p, (_, metadata) in stale.items()}
    admin.set_group_offsets(group, offsets, SHARED_READER + "test", lambda _error: committed.set(), notes)
    assert committed.wait(10) and sum(admin.committed_offsets(group, topic).values()) == 3
    assert client.management.put(state, content='"ACTIVE"', headers=JSON).status_code == 200
    again = subscriber.wait_for(6, timeout=20)[3:]
    assert sorted(r.body for r in again) == sorted(r.body for r in subscriber.received[:3])


@pytest.mark.parametrize("body", [{"retransmissionDate": "yesterday"}, {"retransmissionDate": 5}, {}])
def test_bad_retransmission_dates(client: HermesClient, subscriber: SubscriberServer, body: dict[str, Any]) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url)
    response = client.management.put(f"/topics/{topic}/subscriptions/{name}/retransmission", json=body)
    assert response.status_code == 400
    assert response.json()["code"] == "VALIDATION_ERROR" and "retransmissionDate" in response.json()["message"]


def test_the_older_relative_retransmission_form(client: HermesClient, subscriber: SubscriberServer) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url)
    client.publish(topic, '{"n": 1}')
    subscriber.wait_for(1, timeout=20)
    response = client.management.post(f"/topics/{topic}/subscriptions/{name}/retransmission", content="-6h")
    assert response.status_code == 200
    offsets = response.json()["partitionOffsetListPerBrokerName"]["primary"]
    assert all(p["offset"] == 0 and p["oldestAvailable"] for p in offsets)
    subscriber.wait_for(2, timeout=20)


def test_timeouts_network_errors_and_unhealthy_subscriptions(client: HermesClient) -> None:
    slow = SubscriberServer(lambda n, _r: Reply(200, delay=1.0)).start()
    try:
        topic = client.create_topic()
        timing_out = client.create_subscription(
            topic, slow.url, subscriptionPolicy={"requestTimeout": 100, "messageBackoff": 100, "messageTtl": 60}
        )
        unreachable = client.create_subscription(
            topic, f"http://127.0.0.1:{free_port()}/", subscriptionPolicy={"messageBackoff": 100, "messageTtl": 60}
        )
        client.publish(topic, '{"n": 1}')

        def problems(name: str) -> list[str]:
            health = client.management.get(f"/topics/{topic}/subscriptions/{name}/health").json()
            return [p["code"] for p in health["problems"]]

        def unhealthy() -> set[tuple[str, str]]:
            everyone = client.management.get("/unhealthy", params={"respectMonitoringSeverity": "false"})
            return {(u["topicName"], u["name"]) for u in everyone.json()}

        wait_until(lambda: "UNREACHABLE" in problems(unreachable), 20)
        wait_until(lambda: "TIMING_OUT" in problems(timing_out), 20)
        assert (topic, unreachable) in unhealthy()
        # the limiter soon slows the failing subscription down until whole seconds pass without an attempt;
        # health judges its recent attempts, so it stays unhealthy through those seconds
        wait_until(lambda: _metrics(client, topic, unreachable)["otherErrors"] == "0.0", 20, 0.05)
        assert problems(unreachable) == ["UNREACHABLE"]
        assert (topic, unreachable) in unhealthy()
        assert 0 < _metrics(client, topic, timing_out)["maxRate"] <= 400
        assert _metrics(client, topic, timing_out)["totals"]["timeouts"] >= 1
        assert _metrics(client, topic, unreachable)["totals"]["otherErrors"] >= 1
    finally:
        slow.stop()

"""The consumers as a separate, real ``hermes consumers`` process: killed, restarted, or several of them.

Management and frontend run in this process; they share the SQLite metadata and the broker with the consumers.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.embedded import EmbeddedBroker
from hermes.domain.message import RETRY_COUNT_HEADER
from hermes.domain.names import TopicName
from hermes.metadata.repository import MetadataRepository
from hermes.runtime import Role
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, HermesProcess, InProcessHermes, hermes_settings
from tests.support.subscriber import Received, Reply, SubscriberServer

pytestmark = pytest.mark.integration


class SplitHermes:
    def __init__(self, tmp_path: Path, kafka: EmbeddedBroker) -> None:
        self.tmp_path = tmp_path
        self.bootstrap = kafka.bootstrap_servers
        self.api = InProcessHermes(
            hermes_settings(tmp_path, kafka.bootstrap_servers), frozenset({Role.MANAGEMENT, Role.FRONTEND})
        ).start()
        self.client = HermesClient(self.api.management_url, self.api.frontend_url)
        self.subscriber = SubscriberServer().start()
        self.processes: list[HermesProcess] = []

    @property
    def repository(self) -> MetadataRepository:
        assert self.api.hermes.repository is not None
        return self.api.hermes.repository

    def consumers(self, *extra: str) -> HermesProcess:
        args = (
            "--kafka-bootstrap-servers",
            self.bootstrap,
            "--consumer-commit-interval",
            "0.2",
            "--consumer-metrics-interval",
            "0.2",
            "--metadata-poll-interval",
            "0.05",
            *extra,
        )
        process = HermesProcess(self.tmp_path, *args, command="consumers").start(wait_for="nothing")
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.stop()
        self.client.close()
        self.subscriber.stop()
        self.api.stop()


@pytest.fixture
def split(tmp_path: Path, kafka: EmbeddedBroker) -> Iterator[SplitHermes]:
    running = SplitHermes(tmp_path, kafka)
    yield running
    running.stop()


def publishing(client: HermesClient, topic: str, count: int) -> tuple[threading.Thread, list[str]]:
    """Publishes ``count`` messages in a thread of their own, started; the list fills with their ids as they go."""
    published: list[str] = []

    def publish() -> None:
        for i in range(count):
            response = client.publish(topic, f'{{"n": {i}}}')
            assert response.status_code in (201, 202)
            published.append(response.headers["Hermes-Message-Id"])

    publisher = threading.Thread(target=publish)
    publisher.start()
    return publisher, published


def test_a_killed_consumers_process_loses_nothing(split: SplitHermes) -> None:
    consumers = split.consumers()
    client, subscriber = split.client, split.subscriber
    subscriber.script = lambda _n, _r: Reply(200, delay=0.005)  # keeps messages in flight
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url, subscriptionPolicy={"inflightSize": 20})
    publisher, published = publishing(client, topic, 400)
    subscriber.wait_for(100, timeout=30)
    consumers.stop(signal.SIGKILL)  # mid-stream, with messages in flight and offsets uncommitted
    publisher.join(60)
    split.consumers()
    wait_until(lambda: set(published) <= {r.message_id for r in subscriber.received}, timeout=60, interval=0.2)
    assert len(published) == 400


def test_lifetime_counters_survive_a_consumers_restart(split: SplitHermes) -> None:
    consumers = split.consumers()
    client, subscriber = split.client, split.subscriber
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url)
    metrics_path = f"/topics/{topic}/subscriptions/{name}/metrics"
    for i in range(5):
        client.publish(topic, f'{{"n": {i}}}')
    subscriber.wait_for(5, timeout=30)
    wait_until(lambda: client.management.get(metrics_path).json()["delivered"] == 5, 10)
    status_port = consumers.argv[consumers.argv.index("--consumers-port") + 1]
    prometheus = httpx.get(f"http://127.0.0.1:{status_port}/status/prometheus", timeout=5).text
    assert f'hermes_consumers_delivered_total{{subscription="{name}",topic="{topic}"}} 5.0' in prometheus
    assert consumers.stop() == 0
    split.consumers()
    for i in range(5, 8):
        client.publish(topic, f'{{"n": {i}}}')
    subscriber.wait_for(8, timeout=30)
    wait_until(lambda: client.management.get(metrics_path).json()["delivered"] == 8, 10)
    topic_metrics = client.management.get(f"/topics/{topic}/metrics").json()
    assert topic_metrics["published"] == 8 and topic_metrics["delivered"] == 8

    def published_snapshots() -> int:  # the frontend writes its snapshot every consumer_metrics_interval
        snapshots = split.repository.list_documents("topic-metrics")
        return sum(v["published"] for k, v in snapshots.items() if k.startswith(f"{topic}/"))

    wait_until(lambda: published_snapshots() == 8, 10)


def test_metrics_are_aggregated_over_consumer_nodes(split: SplitHermes) -> None:
    for i in range(2):
        split.consumers("--node-id", f"node-{i}")
    client, subscriber = split.client, split.subscriber
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url)

    def both_nodes_deliver() -> bool:
        client.publish(topic, '{"n": 1}')
        snapshots = split.repository.list_documents("subscription-metrics")
        return all(snapshots.get(f"{topic}${name}/node-{i}", {}).get("delivered", 0) > 0 for i in range(2))

    wait_until(both_nodes_deliver, timeout=40, interval=0.3)  # the two nodes share the partitions

    def settled() -> bool:  # every delivery counted once, by the node that made it
        snapshots = split.repository.list_documents("subscription-metrics")
        per_node = sum(snapshots[f"{topic}${name}/node-{i}"]["delivered"] for i in range(2))
        total = client.management.get(f"/topics/{topic}/subscriptions/{name}/metrics").json()["delivered"]
        return total == per_node == len(subscriber.received)

    wait_until(settled, 10, 0.2)


def test_a_subscription_is_pending_until_a_consumers_process_runs_it(split: SplitHermes) -> None:
    """Hermes' lifecycle: PENDING from creation until consumers start it, then ACTIVE for good (a consumers
    restart changes nothing); SUSPENDED only when a user says so, and it stays so across restarts."""
    client, subscriber = split.client, split.subscriber
    topic = client.create_topic()

    def state(name: str) -> str:
        return str(client.management.get(f"/topics/{topic}/subscriptions/{name}/state").json())

    first = client.create_subscription(topic, subscriber.url)
    assert state(first) == "PENDING"  # no consumers process runs yet
    retransmission = f"/topics/{topic}/subscriptions/{first}/retransmission"
    refused = client.management.put(retransmission, json={"retransmissionDate": "2026-01-01T00:00:00Z"})
    assert (refused.status_code, refused.json()["code"]) == (400, "MOVING_SUBSCRIPTION_OFFSETS_VALIDATION_ERROR")
    dry_run = f"{retransmission}?dryRun=true"
    assert client.management.put(dry_run, json={"retransmissionDate": "2026-01-01T00:00:00Z"}).status_code == 200

    consumers = split.consumers()
    wait_until(lambda: state(first) == "ACTIVE", timeout=30, interval=0.1)
    client.publish(topic, '{"n": 1}')
    subscriber.wait_for(1, timeout=30)
    path = f"/topics/{topic}/subscriptions/{first}"
    assert client.management.put(path, json={"state": "PENDING"}).json()["state"] == "ACTIVE"  # as Hermes: kept
    assert (
        client.management.put(
            f"{path}/state", content='"PENDING"', headers={"Content-Type": "application/json"}
        ).status_code
        == 200
    )
    assert state(first) == "ACTIVE"  # the state route too answers 200 and changes nothing

    assert consumers.stop() == 0
    assert state(first) == "ACTIVE"  # stopping consumers does not make it PENDING again
    second = client.create_subscription(topic, subscriber.url)
    client.set_state(topic, first, "SUSPENDED")
    split.consumers()
    wait_until(lambda: state(second) == "ACTIVE", timeout=30, interval=0.1)
    assert state(first) == "SUSPENDED"


def test_a_consumers_process_killed_while_its_circuit_breaker_is_open_loses_nothing(split: SplitHermes) -> None:
    consumers = split.consumers()
    client, subscriber = split.client, split.subscriber
    failing = threading.Event()
    failing.set()
    subscriber.script = lambda _n, _r: Reply(500 if failing.is_set() else 200)
    topic = client.create_topic()
    name = client.create_subscription(
        topic,
        subscriber.url,
        subscriptionPolicy={"messageBackoff": 50, "inflightSize": 5},
        circuitBreaker={"consecutiveFailures": 3, "probeInterval": 500},
    )
    breaker = f"/topics/{topic}/subscriptions/{name}/circuit-breaker"
    published = [client.publish(topic, f'{{"n": {n}}}').headers["Hermes-Message-Id"] for n in range(5)]
    wait_until(lambda: client.management.get(breaker).json()["state"] != "CLOSED", timeout=30, interval=0.1)
    consumers.stop(signal.SIGKILL)  # the messages wait behind the breaker, uncommitted
    failing.clear()
    restarted = len(subscriber.received)
    split.consumers()  # its breaker starts closed
    wait_until(lambda: set(published) <= {r.message_id for r in subscriber.received[restarted:]}, timeout=60)
    wait_until(lambda: client.management.get(breaker).json()["state"] == "CLOSED", timeout=30, interval=0.1)


@pytest.mark.parametrize("reading", ["shared", "group"])
def test_parked_messages_survive_a_killed_consumers_process(split: SplitHermes, reading: str) -> None:
    """retryParking: killed while messages are parked and others are being parked, then once more while parked
    messages are being delivered: after the restarts every message is delivered (duplicates allowed)."""
    consumers = split.consumers("--consumer-reading", reading)
    client, subscriber = split.client, split.subscriber
    failed: set[str | None] = set()
    delivered: set[str | None] = set()
    lock = threading.Lock()

    def first_fails(_n: int, request: Received) -> Reply:  # every message's first attempt waits 2 s, parked
        with lock:
            if request.message_id in failed:
                delivered.add(request.message_id)
                return Reply(200, delay=0.05)  # slow: parked messages wait in memory when the second kill comes
            failed.add(request.message_id)
        return Reply(503, {"Retry-After": "2"})

    subscriber.script = first_fails
    topic = client.create_topic()
    policy = {"messageTtl": 120, "requestTimeout": 10_000, "inflightSize": 5, "retryParking": {"thresholdMs": 500}}
    client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy)
    publisher, published = publishing(client, topic, 200)
    wait_until(lambda: len(failed) >= 50, timeout=60, interval=0.05)
    consumers.stop(signal.SIGKILL)  # parked ones wait in the retry topic, others are being parked
    publisher.join(60)
    consumers = split.consumers("--consumer-reading", reading)
    wait_until(lambda: len(delivered) >= 20 and len(failed) >= 120, timeout=60, interval=0.05)
    consumers.stop(signal.SIGKILL)  # parked ones being delivered, others waiting in memory until due
    split.consumers("--consumer-reading", reading)
    wait_until(lambda: set(published) <= delivered, timeout=90, interval=0.2)
    assert len(published) == 200


@pytest.mark.parametrize("reading", ["shared", "group"])
def test_the_retry_count_counts_on_across_a_consumers_restart(split: SplitHermes, reading: str) -> None:
    """Hermes-Retry-Count: the attempts of a message still failing when the consumers stop are kept with the
    committed offset, so the next process (or node) counts on from them."""
    consumers = split.consumers("--consumer-reading", reading)
    client, subscriber = split.client, split.subscriber
    subscriber.script = lambda _n, _r: Reply(503)
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url, subscriptionPolicy={"messageBackoff": 200, "messageTtl": 120})
    client.publish(topic, '{"n": 1}')
    subscriber.wait_for(3, timeout=30)
    assert consumers.stop() == 0
    before = len(subscriber.received)
    assert [r.headers[RETRY_COUNT_HEADER] for r in subscriber.received] == [str(n) for n in range(before)]
    subscriber.script = lambda _n, _r: Reply(200)
    split.consumers("--consumer-reading", reading)
    after = subscriber.wait_for(before + 1, timeout=30)[before]
    assert after.message_id == subscriber.received[0].message_id
    assert after.headers[RETRY_COUNT_HEADER] == str(before)


def test_a_retransmission_requested_while_the_consumers_are_down_is_applied_when_they_start(
    split: SplitHermes,
) -> None:
    """Hermes issue #1618: the request must not be taken for one applied before."""
    consumers = split.consumers()
    client, subscriber = split.client, split.subscriber
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url)
    wait_until(lambda: split.repository.get_subscription(TopicName.parse(topic), name).state.value == "ACTIVE", 30)
    for n in range(3):
        client.publish(topic, f'{{"n": {n}}}')
    subscriber.wait_for(3, timeout=30)
    assert consumers.stop() == 0
    path = f"/topics/{topic}/subscriptions/{name}/retransmission"
    response = client.management.put(path, json={"retransmissionDate": "-1h"})
    assert response.status_code == 200, response.text
    split.consumers()
    again = subscriber.wait_for(6, timeout=30)[3:]
    assert sorted(r.body for r in again) == sorted(r.body for r in subscriber.received[:3])


def test_a_retransmission_overwritten_by_a_stopping_members_commit_is_applied_by_the_next_member(
    split: SplitHermes,
) -> None:
    """Hermes issue #1618 during a restart, with a consumer group per subscription (as in a cluster): the
    stopping member's last commit lands after management's; the next member reads from the request's offsets."""
    consumers = split.consumers("--consumer-reading", "group")
    client, subscriber = split.client, split.subscriber
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url)
    for n in range(3):
        client.publish(topic, f'{{"n": {n}}}')
    subscriber.wait_for(3, timeout=30)
    group = f"hermes_{topic}_{name}"
    admin = BrokerAdmin(split.api.hermes.connection)
    wait_until(lambda: sum(admin.committed_offsets(group, topic).values()) == 3, 10)
    stale = admin.committed(group, topic)  # the member's offsets, noting the retransmission it applied last
    assert consumers.stop() == 0
    path = f"/topics/{topic}/subscriptions/{name}/retransmission"
    response = client.management.put(path, json={"retransmissionDate": "-1h"})
    assert response.status_code == 200, response.text
    for partition, (offset, metadata) in stale.items():  # the stopping member's commit, landing after
        admin.commit_offsets(group, topic, {partition: offset}, metadata)
    assert sum(admin.committed_offsets(group, topic).values()) == 3
    split.consumers("--consumer-reading", "group")
    again = subscriber.wait_for(6, timeout=30)[3:]
    assert sorted(r.body for r in again) == sorted(r.body for r in subscriber.received[:3])

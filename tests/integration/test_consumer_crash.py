"""At-least-once across a SIGKILL of the real ``hermes consumers`` process under load."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import pytest

from hermes.broker.embedded import EmbeddedBroker
from hermes.runtime import Role
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, HermesProcess, InProcessHermes, hermes_settings
from tests.support.subscriber import Reply, SubscriberServer

pytestmark = pytest.mark.integration


def test_a_killed_consumers_process_loses_nothing(tmp_path: Path, kafka: EmbeddedBroker) -> None:
    settings = hermes_settings(tmp_path, kafka.bootstrap_servers)
    api = InProcessHermes(settings, frozenset({Role.MANAGEMENT, Role.FRONTEND})).start()
    subscriber = SubscriberServer(lambda n, _r: Reply(200, delay=0.005)).start()
    consumers_args = (
        "--kafka-bootstrap-servers",
        kafka.bootstrap_servers,
        "--consumer-commit-interval",
        "0.2",
        "--metadata-poll-interval",
        "0.05",
    )
    consumers = HermesProcess(tmp_path, *consumers_args, command="consumers").start(wait_for="nothing")
    client = HermesClient(api.management_url, api.frontend_url)
    try:
        topic = client.create_topic()
        client.create_subscription(topic, subscriber.url, subscriptionPolicy={"inflightSize": 20})
        published: list[str] = []

        def publish(count: int) -> None:
            for i in range(count):
                response = client.publish(topic, f'{{"n": {i}}}')
                assert response.status_code in (201, 202)
                published.append(response.headers["Hermes-Message-Id"])

        publisher = threading.Thread(target=publish, args=(400,))
        publisher.start()
        subscriber.wait_for(100, timeout=30)
        consumers.stop(signal.SIGKILL)  # mid-stream, with messages in flight and offsets uncommitted
        publisher.join(60)
        consumers = HermesProcess(tmp_path, *consumers_args, command="consumers").start(wait_for="nothing")

        def everything_arrived() -> bool:
            return set(published) <= {r.message_id for r in subscriber.received}

        wait_until(everything_arrived, timeout=60, interval=0.2)
        assert len(published) == 400
    finally:
        consumers.stop()
        client.close()
        subscriber.stop()
        api.stop()


def test_lifetime_counters_survive_a_consumers_restart(tmp_path: Path, kafka: EmbeddedBroker) -> None:
    settings = hermes_settings(tmp_path, kafka.bootstrap_servers)
    api = InProcessHermes(settings, frozenset({Role.MANAGEMENT, Role.FRONTEND})).start()
    subscriber = SubscriberServer().start()
    args = (
        "--kafka-bootstrap-servers",
        kafka.bootstrap_servers,
        "--consumer-metrics-interval",
        "0.2",
        "--metadata-poll-interval",
        "0.05",
    )
    consumers = HermesProcess(tmp_path, *args, command="consumers").start(wait_for="nothing")
    client = HermesClient(api.management_url, api.frontend_url)
    metrics_path = ""
    try:
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
        consumers = HermesProcess(tmp_path, *args, command="consumers").start(wait_for="nothing")
        for i in range(5, 8):
            client.publish(topic, f'{{"n": {i}}}')
        subscriber.wait_for(8, timeout=30)
        wait_until(lambda: client.management.get(metrics_path).json()["delivered"] == 8, 10)
        topic_metrics = client.management.get(f"/topics/{topic}/metrics").json()
        assert topic_metrics["published"] == 8 and topic_metrics["delivered"] == 8
        assert api.hermes.repository is not None
        snapshots = api.hermes.repository.list_documents("topic-metrics")
        assert sum(v["published"] for k, v in snapshots.items() if k.startswith(f"{topic}/")) == 8
    finally:
        consumers.stop()
        client.close()
        subscriber.stop()
        api.stop()


def test_metrics_are_aggregated_over_consumer_nodes(tmp_path: Path, kafka: EmbeddedBroker) -> None:
    settings = hermes_settings(tmp_path, kafka.bootstrap_servers)
    api = InProcessHermes(settings, frozenset({Role.MANAGEMENT, Role.FRONTEND})).start()
    subscriber = SubscriberServer().start()
    args = (
        "--kafka-bootstrap-servers",
        kafka.bootstrap_servers,
        "--consumer-metrics-interval",
        "0.2",
        "--metadata-poll-interval",
        "0.05",
    )
    nodes = [
        HermesProcess(tmp_path, *args, "--node-id", f"node-{i}", command="consumers").start(wait_for="nothing")
        for i in range(2)
    ]
    client = HermesClient(api.management_url, api.frontend_url)
    try:
        topic = client.create_topic()
        name = client.create_subscription(topic, subscriber.url)
        assert api.hermes.repository is not None
        repository = api.hermes.repository

        def both_nodes_deliver() -> bool:
            client.publish(topic, '{"n": 1}')
            snapshots = repository.list_documents("subscription-metrics")
            return all(snapshots.get(f"{topic}${name}/node-{i}", {}).get("delivered", 0) > 0 for i in range(2))

        wait_until(both_nodes_deliver, timeout=40, interval=0.3)  # the two nodes share the partitions

        def settled() -> bool:  # every delivery counted once, by the node that made it
            snapshots = repository.list_documents("subscription-metrics")
            per_node = sum(snapshots[f"{topic}${name}/node-{i}"]["delivered"] for i in range(2))
            total = client.management.get(f"/topics/{topic}/subscriptions/{name}/metrics").json()["delivered"]
            return total == per_node == len(subscriber.received)

        wait_until(settled, 10, 0.2)
    finally:
        for node in nodes:
            node.stop()
        client.close()
        subscriber.stop()
        api.stop()

"""Distributed mode with real processes: ZooKeeper, Kafka, management and a frontend (in this process) and
`hermes consumers` nodes as separate processes. The nodes register, the elected coordinator assigns the
subscriptions, and nodes SIGKILLed (the coordinator among them) are replaced within the documented bound."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes.broker.embedded import EmbeddedBroker
from hermes.runtime import Role
from tests.support.hermes import HermesClient, HermesProcess, InProcessHermes, hermes_settings, unique
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until
from tests.support.zookeeper import ZookeeperServer

pytestmark = pytest.mark.integration

SESSION_TIMEOUT = 2.0  # a dead node leaves the cluster this long after its last heartbeat
REPORT_INTERVAL = 0.5
STANDBY_TIMEOUT = 1.0
# docs/cluster.md: kill to the replacement's consumer running = session timeout + a coordinator round + a consumer
# start; generous for a loaded two-core machine, and a passing test does not wait for it.
FAILOVER_BOUND = SESSION_TIMEOUT + REPORT_INTERVAL + 15


class Cluster:
    def __init__(self, tmp: Path, kafka: EmbeddedBroker, zookeeper: ZookeeperServer, root: str) -> None:
        self.tmp, self.kafka, self.zookeeper, self.root = tmp, kafka, zookeeper, root
        self.nodes: dict[str, HermesProcess] = {}

    def flags(self) -> list[str]:
        return [
            "--metadata-store=zookeeper",
            f"--zookeeper-connect={self.zookeeper.connect}",
            f"--zookeeper-root={self.root}",
            f"--kafka-bootstrap-servers={self.kafka.bootstrap_servers}",
            f"--cluster-session-timeout={SESSION_TIMEOUT}",
            f"--cluster-report-interval={REPORT_INTERVAL}",
            f"--cluster-standby-timeout={STANDBY_TIMEOUT}",
        ]

    def settings(self) -> dict[str, Any]:
        return {
            "metadata_store": "zookeeper",
            "zookeeper_connect": self.zookeeper.connect,
            "zookeeper_root": self.root,
            "cluster_session_timeout": SESSION_TIMEOUT,
            "cluster_report_interval": REPORT_INTERVAL,
        }

    def start_node(self, node: str) -> HermesProcess:
        process = HermesProcess(self.tmp / node, *self.flags(), f"--node-id={node}", command="consumers")
        self.nodes[node] = process.start(wait_for="nothing")
        return process

    def stop(self) -> None:
        for process in self.nodes.values():
            if process.process is not None and process.process.poll() is None:
                process.stop(signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path: Path, kafka: EmbeddedBroker, zookeeper: ZookeeperServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, kafka, zookeeper, f"/{unique('cluster')}")
    yield running
    running.stop()


@pytest.fixture
def front(cluster: Cluster, tmp_path: Path, kafka: EmbeddedBroker) -> Iterator[HermesClient]:
    """Management and a frontend in this process, on the cluster's ZooKeeper."""
    settings = hermes_settings(tmp_path / "front", kafka.bootstrap_servers, **cluster.settings())
    hermes = InProcessHermes(settings, frozenset({Role.MANAGEMENT, Role.FRONTEND})).start()
    api = HermesClient(hermes.management_url, hermes.frontend_url)
    yield api
    api.close()
    hermes.stop()


def nodes(client: HermesClient) -> dict[str, dict[str, Any]]:
    response = client.management.get("/consumers/nodes")
    assert response.status_code == 200, response.text
    return {node["nodeId"]: node for node in response.json()}


def assigned(client: HermesClient) -> dict[str, list[str]]:
    """Subscription -> the live nodes assigned to it that report running it."""
    out: dict[str, list[str]] = {}
    for node, report in nodes(client).items():
        for name in report["subscriptions"]:
            if name in report["running"]:
                out.setdefault(name, []).append(node)
    return out


def test_nodes_register_share_subscriptions_and_replace_the_dead(
    cluster: Cluster, front: HermesClient, subscriber: SubscriberServer
) -> None:
    for node in ("n1", "n2", "n3"):
        cluster.start_node(node)
    wait_until(lambda: len(nodes(front)) == 3, timeout=60)
    listed = nodes(front)
    assert sum(node["coordinator"] for node in listed.values()) == 1
    assert all(node["load"]["memoryBytes"] > 0 and node["address"].startswith("http://") for node in listed.values())
    frontends = front.management.get("/frontends/nodes").json()
    assert [f["address"] for f in frontends] == [str(front.frontend.base_url).rstrip("/")]

    topic = front.create_topic()
    single = unique("single")
    response = front.management.put(
        "/workload-constraints/subscription",
        json={"subscriptionName": f"{topic}${single}", "constraints": {"consumersNumber": 1}},
    )
    assert response.status_code == 201, response.text
    shared = [front.create_subscription(topic, f"{subscriber.url}{name}", name) for name in ("s1", "s2")]
    front.create_subscription(topic, f"{subscriber.url}{single}", single)
    names = {f"{topic}${name}": name for name in [*shared, single]}
    wanted = {f"{topic}${name}": 2 for name in shared} | {f"{topic}${single}": 1}
    wait_until(lambda: {s: len(n) for s, n in assigned(front).items()} == wanted, timeout=60)
    standbys = {s for node in nodes(front).values() for s in node["standbyFor"]}
    assert standbys == {f"{topic}${single}"}

    def delivered(count: int) -> None:
        sent = []
        for i in range(count):
            response = front.publish(topic, f'{{"n": {i}}}')
            assert response.status_code in (201, 202), response.text
            sent.append(response.headers["Hermes-Message-Id"])

        def all_there() -> bool:
            got = {(r.path.strip("/"), r.message_id) for r in subscriber.received}
            return all((name, id_) in got for name in names.values() for id_ in sent)

        wait_until(all_there, timeout=60)

    delivered(10)

    # SIGKILL the node of the one-node subscription, then the coordinator (or another node if it was both)
    victim = assigned(front)[f"{topic}${single}"][0]
    killed_at = time.monotonic()
    cluster.nodes[victim].stop(signal.SIGKILL)
    wait_until(lambda: victim not in nodes(front) and f"{topic}${single}" in assigned(front), timeout=60)
    assert time.monotonic() - killed_at < FAILOVER_BOUND
    delivered(10)

    coordinator = next(n for n, report in nodes(front).items() if report["coordinator"])
    cluster.nodes[coordinator].stop(signal.SIGKILL)
    survivor = next(n for n in ("n1", "n2", "n3") if n not in (victim, coordinator))
    wait_until(lambda: set(nodes(front)) == {survivor} and nodes(front)[survivor]["coordinator"], timeout=60)
    wait_until(lambda: {s: len(n) for s, n in assigned(front).items()} == dict.fromkeys(wanted, 1), timeout=60)
    delivered(10)

    # a node joining gets the slots the survivor could not take
    cluster.start_node("n4")
    wait_until(lambda: {s: len(n) for s, n in assigned(front).items()} == wanted, timeout=60)
    assert nodes(front)["n4"]["subscriptions"]
    delivered(10)

"""Distributed mode with real processes: ZooKeeper, Kafka, management and a frontend (in this process) and
`hermes consumers` nodes as separate processes. The nodes register, the elected coordinator assigns the
subscriptions, and nodes SIGKILLed (the coordinator among them) are replaced within the documented bound."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes.bench.zookeeper import ZookeeperServer
from hermes.broker.embedded import EmbeddedBroker
from hermes.cluster.assignment import Assignment
from hermes.cluster.discovery import FrontendDiscovery
from hermes.cluster.registry import ClusterStore
from hermes.runtime import Role
from tests.support.cluster import FAILOVER_BOUND, Cluster, assigned, coordinator, nodes
from tests.support.hermes import HermesClient, InProcessHermes, hermes_settings, unique
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


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


def test_nodes_register_share_subscriptions_and_replace_the_dead(
    cluster: Cluster, front: HermesClient, subscriber: SubscriberServer
) -> None:
    management = front.management
    for node in ("n1", "n2", "n3"):
        cluster.start(node, "consumers")
    wait_until(lambda: len(nodes(management)) == 3, timeout=60)
    listed = nodes(management)
    assert sum(node["coordinator"] for node in listed.values()) == 1
    assert all(node["load"]["memoryBytes"] > 0 for node in listed.values())
    assert all(re.fullmatch(r"http://127\.0\.0\.1:\d+", node["address"]) for node in listed.values())
    frontend_url = str(front.frontend.base_url).rstrip("/")
    assert [f["address"] for f in management.get("/frontends/nodes").json()] == [frontend_url]
    with FrontendDiscovery(cluster.zookeeper.connect, cluster.root) as discovery:
        assert discovery.least_loaded() == frontend_url

    topic = front.create_topic()
    single = unique("single")
    response = management.put(
        "/workload-constraints/subscription",
        json={"subscriptionName": f"{topic}${single}", "constraints": {"consumersNumber": 1}},
    )
    assert response.status_code == 201, response.text
    shared = [front.create_subscription(topic, f"{subscriber.url}{name}", name) for name in ("s1", "s2")]
    front.create_subscription(topic, f"{subscriber.url}{single}", single)
    names = {f"{topic}${name}": name for name in [*shared, single]}
    wanted = {f"{topic}${name}": 2 for name in shared} | {f"{topic}${single}": 1}
    wait_until(lambda: {s: len(n) for s, n in assigned(management).items()} == wanted, timeout=60)
    standbys = {s for node in nodes(management).values() for s in node["standbyFor"]}
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

    def serving() -> list[str]:  # from the nodes' metric snapshots, written every second
        return sorted(management.get(f"/topics/{topic}/subscriptions/s1/metrics").json()["nodes"])

    wait_until(lambda: serving() == sorted(assigned(management)[f"{topic}$s1"]), timeout=30)

    # SIGKILL the node of the one-node subscription, then the coordinator (or another node if it was both)
    victim = assigned(management)[f"{topic}${single}"][0]
    killed_at = time.monotonic()
    cluster.kill(victim)
    wait_until(lambda: victim not in nodes(management) and f"{topic}${single}" in assigned(management), timeout=60)
    assert time.monotonic() - killed_at < FAILOVER_BOUND
    delivered(10)

    leader = coordinator(management)
    assert leader is not None
    cluster.kill(leader)
    survivor = next(n for n in ("n1", "n2", "n3") if n not in (victim, leader))
    wait_until(lambda: set(nodes(management)) == {survivor} and coordinator(management) == survivor, timeout=60)
    wait_until(lambda: {s: len(n) for s, n in assigned(management).items()} == dict.fromkeys(wanted, 1), timeout=60)
    delivered(10)

    # a node joining gets the slots the survivor could not take
    cluster.start("n4", "consumers")
    wait_until(lambda: {s: len(n) for s, n in assigned(management).items()} == wanted, timeout=60)
    assert nodes(management)["n4"]["subscriptions"]
    delivered(10)


def test_a_move_by_load_adds_the_new_node_before_removing_the_old(
    cluster: Cluster, front: HermesClient, subscriber: SubscriberServer
) -> None:
    management = front.management
    # an idle node's smoothed CPU is about 0.01 of a core here, the one delivering the subscription twice that
    thresholds = ("--cluster-load-high=0.018", "--cluster-load-low=0.015", "--cluster-move-interval=3")
    for node in ("n1", "n2"):
        cluster.start(node, "consumers", *thresholds)
    topic = front.create_topic()
    name = unique("moved")
    qualified = f"{topic}${name}"
    response = management.put(
        "/workload-constraints/subscription",
        json={"subscriptionName": qualified, "constraints": {"consumersNumber": 1}},
    )
    assert response.status_code == 201, response.text
    seen: list[tuple[str, ...]] = []  # every version of the subscription's assignees, as ZooKeeper has them

    def assignment_changed(assignment: Assignment) -> None:
        owners = tuple(sorted(assignment.subscriptions.get(qualified, ())))
        if not seen or seen[-1] != owners:
            seen.append(owners)

    def owners_in_turn() -> list[tuple[str, ...]]:
        return [owners for owners in list(seen) if len(owners) == 1]

    store = ClusterStore(cluster.zookeeper.connect, cluster.root, 10.0)
    sent = []
    try:
        store.watch_assignment(assignment_changed)
        front.create_subscription(topic, f"{subscriber.url}{name}", name)

        def moved() -> bool:
            for _ in range(3):  # the subscription's node works: its load stays over the high threshold
                sent.append(front.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"])
            return len(owners_in_turn()) >= 2

        wait_until(moved, timeout=60, interval=0.1)
    finally:
        store.close()
    (first,), (second,) = owners_in_turn()[:2]
    assert first != second
    at = seen.index((second,))
    assert seen[at - 1] == tuple(sorted((first, second)))  # both ran it before the old node let go
    # delivery went on through the move: everything published meanwhile arrives
    wait_until(lambda: set(sent) <= {r.message_id for r in subscriber.received if r.path.strip("/") == name}, 60)

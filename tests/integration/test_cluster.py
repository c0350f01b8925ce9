"""Distributed mode with real processes: ZooKeeper, Kafka, management and a frontend (in this process) and
`hermes consumers` nodes as separate processes. The nodes register, the elected coordinator assigns the
subscriptions, and nodes SIGKILLed (the coordinator among them) are replaced within the documented bound."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes.bench.zookeeper import ZookeeperServer
from hermes.broker.admin import BrokerAdmin
from hermes.broker.embedded import EmbeddedBroker
from hermes.cluster.assignment import Assignment, Limits, Rebalancing, start_move
from hermes.cluster.coordinator import Coordinator, CoordinatorSettings
from hermes.cluster.discovery import FrontendDiscovery
from hermes.cluster.registry import CONSUMERS, ClusterStore
from hermes.domain.message import RETRY_COUNT_HEADER
from hermes.errors import MetadataUnreachable
from hermes.runtime import Role
from tests.support.cluster import FAILOVER_BOUND, Cluster, assigned, coordinator, expire_session, nodes
from tests.support.hermes import HermesClient, InProcessHermes, hermes_settings, unique
from tests.support.subscriber import Received, Reply, SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(tmp_path: Path, kafka: EmbeddedBroker, zookeeper: ZookeeperServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, kafka, zookeeper, f"/{unique('cluster')}")
    yield running
    running.stop()


@pytest.fixture
def front_hermes(cluster: Cluster, tmp_path: Path, kafka: EmbeddedBroker) -> Iterator[InProcessHermes]:
    """Management and a frontend in this process, on the cluster's ZooKeeper."""
    settings = hermes_settings(tmp_path / "front", kafka.bootstrap_servers, **cluster.settings())
    hermes = InProcessHermes(settings, frozenset({Role.MANAGEMENT, Role.FRONTEND})).start()
    yield hermes
    hermes.stop()


@pytest.fixture
def front(front_hermes: InProcessHermes) -> Iterator[HermesClient]:
    api = HermesClient(front_hermes.management_url, front_hermes.frontend_url)
    yield api
    api.close()


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

    # from the nodes' metric snapshots, written every second; a node that stopped its consumer (the evening out
    # moves a slot of s1 as the subscriptions are created) marks its last one, and is named no more
    def serving() -> list[str]:
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


def test_the_coordinator_moves_by_the_loads_its_members_report(
    cluster: Cluster, front_hermes: InProcessHermes, front: HermesClient
) -> None:
    """The decision, on loads this test reports for its members (a real node's CPU moves with whatever else the
    machine runs): the heaviest subscription of a node over ``high`` goes to the least-loaded node under ``low``,
    one move per move interval, and the old node lets go only once the new one reports running it."""
    topic = front.create_topic()
    light, heavy, on_warm, on_idle = (
        f"{topic}${front.create_subscription(topic, 'http://127.0.0.1:9/', name)}" for name in "lhwi"
    )
    store = ClusterStore(cluster.zookeeper.connect, cluster.root, 10.0)

    def report(node: str, cpu: float, running: tuple[str, ...] = (), **attempts: float) -> None:
        document = {"id": node, "load": {"cpu": cpu}, "running": list(running), "attemptsPerSecond": attempts}
        store.report(CONSUMERS, node, document)

    seen: list[tuple[float, Assignment]] = []  # every version of the assignment, with when it was seen

    def assignment_changed(assignment: Assignment) -> None:
        seen.append((time.monotonic(), assignment))

    store.watch_assignment(assignment_changed)

    def first_seen(condition: Callable[[Assignment], bool]) -> tuple[float, Assignment]:
        """The first version of the assignment that meets ``condition``, once there is one, and when it came."""
        wait_until(lambda: any(condition(a) for _, a in list(seen)), timeout=30)
        return next((at, a) for at, a in list(seen) if condition(a))

    assert front_hermes.hermes.repository is not None and front_hermes.hermes.cache is not None
    settings = CoordinatorSettings(Limits(consumers_per_subscription=1), Rebalancing(0.8, 0.5), 0.1, 1.0)
    coordinator = Coordinator(store, front_hermes.hermes.repository, front_hermes.hermes.cache, "c", settings)
    try:
        for node in ("busy", "warm", "idle"):
            store.register(CONSUMERS, node, {"id": node})
        report("busy", 0.9, (light, heavy), **{light: 10.0, heavy: 500.0})
        report("warm", 0.6)
        report("idle", 0.1)
        initial = {light: ("busy",), heavy: ("busy",), on_warm: ("warm",), on_idle: ("idle",)}  # evenly spread
        assert store.write_assignment(Assignment(initial), -1)
        coordinator.start()

        started, moving = first_seen(lambda a: bool(a.moves))
        assert moving.moves == {heavy: ("busy", "idle")}  # the heaviest, to the idlest under low (not warm)
        assert moving.subscriptions == {**initial, heavy: ("busy", "idle")}

        # a later round (a new subscription wakes the coordinator) keeps both: the new node does not run it yet
        later = f"{topic}${front.create_subscription(topic, 'http://127.0.0.1:9/', 'x')}"
        _, kept = first_seen(lambda a: later in a.subscriptions)
        assert kept.moves == moving.moves and kept.subscriptions[heavy] == ("busy", "idle")

        # the new node runs it and takes work: its load rises over low while warm's falls under it
        report("idle", 0.7, (heavy,), **{heavy: 480.0})
        report("warm", 0.3)
        finished, _ = first_seen(lambda a: a.subscriptions.get(heavy) == ("idle",))
        assert all(a.subscriptions[heavy] == ("busy", "idle") for at, a in seen if started <= at < finished)

        again, second = first_seen(lambda a: light in a.moves)
        assert second.moves == {light: ("busy", "warm")}  # the loads as reported now
        # seen through the watch: the first move's notification may come later than the second's, by a little
        assert again - started >= settings.move_interval - 0.2

        # its session expires, and the members' znodes (this store's) and its election znode with it: it leads
        # again in the new session (none other would) and takes nothing from anybody while nobody is registered
        before, _ = store.read_assignment()
        expired = store.client.client_id
        assert expired is not None and store.election("").contenders() == ["c"]
        expire_session(store.session, expired, cluster.zookeeper.connect)
        wait_until(lambda: store.election("").contenders() == ["c"] and coordinator.leading, timeout=10)
        time.sleep(10 * settings.interval)  # rounds in the new session, with no member
        assert store.read_assignment()[0] == before
    finally:
        coordinator.stop()
        store.close()


def _members_read_again_while_unreachable(store: ClusterStore) -> dict[str, dict[str, Any]]:
    """The consumer nodes' registrations, read from a watch's callback: on a loaded machine the test's own session
    was briefly unreachable there (the read refused at once), and the callback lost the version it was recording."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return store.members(CONSUMERS)
        except MetadataUnreachable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_move_adds_the_new_node_before_removing_the_old(
    cluster: Cluster, front: HermesClient, subscriber: SubscriberServer
) -> None:
    """Real nodes follow a move by load (started here as the coordinator starts one: the new node beside the old
    in the assignment) without losing a message: the coordinator drops the old node once the new one runs it."""
    management = front.management
    for node in ("n1", "n2"):
        cluster.start(node, "consumers")
    # both members before the move: a coordinator drops an assignee that has not registered yet, and the move too
    wait_until(lambda: len(nodes(management)) == 2, timeout=60)
    topic = front.create_topic()
    name = unique("moved")
    qualified = f"{topic}${name}"
    response = management.put(
        "/workload-constraints/subscription",
        json={"subscriptionName": qualified, "constraints": {"consumersNumber": 1}},
    )
    assert response.status_code == 201, response.text
    seen: list[tuple[str, ...]] = []  # every version of the subscription's assignees, as ZooKeeper has them
    running: dict[tuple[str, ...], dict[str, bool]] = {}  # each version's nodes: whether they reported running it
    store = ClusterStore(cluster.zookeeper.connect, cluster.root, 10.0)

    def assignment_changed(assignment: Assignment) -> None:
        owners = tuple(assignment.subscriptions.get(qualified, ()))
        if not seen or seen[-1] != owners:
            seen.append(owners)
            members = _members_read_again_while_unreachable(store)
            running.setdefault(owners, {n: qualified in members.get(n, {}).get("running", ()) for n in owners})

    sent = []

    def publish() -> None:
        for _ in range(3):
            sent.append(front.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"])

    try:
        store.watch_assignment(assignment_changed)
        front.create_subscription(topic, f"{subscriber.url}{name}", name)
        wait_until(lambda: len(assigned(management).get(qualified, ())) == 1, timeout=60)
        (first,) = assigned(management)[qualified]
        second = next(n for n in ("n1", "n2") if n != first)

        def move_started() -> bool:  # the coordinator writes too (its rounds): on its newer version, again
            current, version = store.read_assignment()
            return store.write_assignment(start_move(current, qualified, first, second), version)

        wait_until(move_started, timeout=30)

        def moved() -> bool:
            publish()  # delivery goes on meanwhile
            return (second,) in seen

        wait_until(moved, timeout=60, interval=0.1)
    finally:
        store.close()
    at = seen.index((second,))
    assert seen[at - 1] == (first, second)  # both ran it before the old node let go
    assert running[(second,)] == {second: True}  # the new node had started it
    assert seen.index((first,)) < at - 1
    # everything published through the move arrives
    wait_until(lambda: set(sent) <= {r.message_id for r in subscriber.received if r.path.strip("/") == name}, 60)


def test_nodes_started_one_by_one_and_restarted_share_the_slots_evenly(cluster: Cluster, front: HermesClient) -> None:
    """Issue 33: three nodes and four subscriptions of two nodes each (8 slots); the node that came last held none
    of them, at start and after a restart, while the others held 4 each."""
    management = front.management
    topic = front.create_topic()
    for _ in range(4):
        front.create_subscription(topic, "http://127.0.0.1:9/")

    def running_per_node() -> list[int]:
        per_node = dict.fromkeys(nodes(management), 0)
        for serving in assigned(management).values():
            for node in serving:
                per_node[node] += 1
        return sorted(per_node.values())

    cluster.start("n1", "consumers")
    wait_until(lambda: running_per_node() == [4], timeout=60)
    cluster.start("n2", "consumers")
    wait_until(lambda: running_per_node() == [4, 4], timeout=60)
    cluster.start("n3", "consumers")
    wait_until(lambda: running_per_node() == [2, 3, 3], timeout=60)
    cluster.processes["n3"].stop()  # a planned restart: SIGTERM, the node leaves at once
    wait_until(lambda: running_per_node() == [4, 4], timeout=60)
    cluster.restart("n3")
    wait_until(lambda: running_per_node() == [2, 3, 3], timeout=60)


def test_a_parked_message_is_delivered_by_one_node_of_the_cluster(
    cluster: Cluster, front_hermes: InProcessHermes, front: HermesClient, subscriber: SubscriberServer
) -> None:
    """retryParking on two nodes: each node reads its share of the retry topic in the subscription's parking
    group, so each parked message comes back once (every node read the whole retry topic before: twice), also
    when the second node joins while the first holds parked messages not due yet (its share goes over)."""
    management = front.management
    topic = front.create_topic()  # two partitions, and so has the retry topic
    policy = {"messageTtl": 60, "retryParking": {"thresholdMs": 500}}
    name = front.create_subscription(topic, subscriber.url, subscriptionPolicy=policy)
    cluster.start("n1", "consumers")
    wait_until(lambda: len(assigned(management).get(f"{topic}${name}", [])) == 1, timeout=60)
    failed: set[str | None] = set()

    def first_fails(_n: int, request: Received) -> Reply:
        if request.message_id in failed:
            return Reply(200)
        failed.add(request.message_id)
        return Reply(503, {"Retry-After": "5"})

    subscriber.script = first_fails
    sent = set()
    for i in range(10):
        response = front.publish(topic, f'{{"n": {i}}}', headers={"Partition-Key": str(i)})
        assert response.status_code in (201, 202), response.text
        sent.add(response.headers["Hermes-Message-Id"])
    admin = BrokerAdmin(front_hermes.hermes.connection)
    retry_topic = f"{topic}..{name}..parked"
    wait_until(lambda: sum(admin.end_offsets(retry_topic).values()) == 10, timeout=30)  # parked by n1
    cluster.start("n2", "consumers")
    wait_until(lambda: len(assigned(management).get(f"{topic}${name}", [])) == 2, timeout=60)

    def retried() -> list[str | None]:
        return [r.message_id for r in subscriber.received if r.headers.get(RETRY_COUNT_HEADER) == "1"]

    wait_until(lambda: set(retried()) == sent, timeout=60)
    group = f"hermes-parked_{topic}_{name}"
    wait_until(lambda: sum(admin.committed_offsets(group, retry_topic).values()) == 10, timeout=30)
    assert sorted(retried()) == sorted(sent)  # each parked message delivered by one node

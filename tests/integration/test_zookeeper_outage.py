"""ZooKeeper going away under a running cluster: its own ZooKeeper server (this module kills and pauses it),
management and a frontend in this process, `hermes management` and `hermes consumers` as processes.

Management answers 503 at once while ZooKeeper is unreachable (never a hang, never a 500, also when the session
expired meanwhile), answers reads it made before from what ZooKeeper said then with the data's age, is back
within a second or two of ZooKeeper, and processes stop on SIGTERM within seconds, committing their offsets."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.embedded import EmbeddedBroker
from hermes.runtime import Role
from tests.support.cluster import Cluster, OutageZookeeper, assigned, coordinator, expire_session, nodes
from tests.support.hermes import HermesClient, InProcessHermes, hermes_settings, unique
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

AT_ONCE = 2.0  # seconds for a 503 while ZooKeeper is away (ms when idle; the rest is a busy machine's slack)
BACK_WITHIN = 5.0  # from ZooKeeper's return to management's first write (reconnection tries every second)
SHUTDOWN_WITHIN = 8.0  # from SIGTERM to the process's exit, with ZooKeeper silent


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutageZookeeper]:
    """This module's own: its tests take it away."""
    server = OutageZookeeper(tmp_path_factory.mktemp("zookeeper-outage"))
    server.start()
    yield server
    server.ensure_running()
    server.stop()


@pytest.fixture(autouse=True)
def zookeeper_back(zookeeper: OutageZookeeper) -> Iterator[None]:
    yield
    zookeeper.ensure_running()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, kafka: EmbeddedBroker, zookeeper: OutageZookeeper
) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("outage"), kafka, zookeeper, f"/{unique('outage')}")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def front(cluster: Cluster, kafka: EmbeddedBroker) -> Iterator[InProcessHermes]:
    settings = hermes_settings(cluster.tmp / "front", kafka.bootstrap_servers, **cluster.settings())
    hermes = InProcessHermes(settings, frozenset({Role.MANAGEMENT, Role.FRONTEND})).start()
    yield hermes
    hermes.stop()


@pytest.fixture(scope="module")
def api(front: InProcessHermes) -> Iterator[HermesClient]:
    client = HermesClient(front.management_url, front.frontend_url)
    yield client
    client.close()


def timed(call: httpx.Client, method: str, path: str, **kwargs: object) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call.request(method, path, timeout=10, **kwargs)  # type: ignore[arg-type]
    return response, time.monotonic() - started


def a_group() -> dict[str, str]:
    return {"groupName": unique("g")}


def test_management_answers_503_at_once_while_zookeeper_is_down_and_reads_say_how_old(
    api: HermesClient, zookeeper: OutageZookeeper
) -> None:
    management = api.management
    topic = api.create_topic()
    before = management.get(f"/topics/{topic}")
    assert before.status_code == 200 and "Hermes-Metadata-Age" not in before.headers
    assert management.get("/groups").status_code == 200

    zookeeper.kill()
    refused, took = timed(management, "POST", "/groups", json=a_group())
    assert refused.status_code == 503, refused.text
    assert took < AT_ONCE
    assert refused.json()["code"] == "METADATA_UNAVAILABLE"
    assert "ZooKeeper" in refused.json()["message"]
    assert refused.headers["Retry-After"] == "1"

    stale, took = timed(management, "GET", f"/topics/{topic}")
    assert stale.status_code == 200 and took < AT_ONCE
    assert stale.json() == before.json()
    assert int(stale.headers["Hermes-Metadata-Age"]) >= 0
    assert "Hermes-Metadata-Age" in management.get("/groups").headers
    never_read, took = timed(management, "GET", f"/topics/{topic}x")
    assert never_read.status_code == 503 and took < AT_ONCE

    zookeeper.start()
    back = time.monotonic()
    wait_until(lambda: management.post("/groups", json=a_group(), timeout=10).status_code == 201, timeout=30)
    assert time.monotonic() - back < BACK_WITHIN
    fresh = management.get(f"/topics/{topic}")
    assert fresh.status_code == 200 and "Hermes-Metadata-Age" not in fresh.headers


def test_a_session_expired_in_an_outage_gives_503s_never_500s_and_notifications_flow_again(
    front: InProcessHermes, api: HermesClient, zookeeper: OutageZookeeper
) -> None:
    management = api.management
    topic = api.create_topic()
    session = front.hermes.repository.session  # type: ignore[union-attr]
    expired = session.client.client_id
    zookeeper.kill()
    calls = [("POST", "/groups", {"json": a_group()}), ("GET", f"/topics/{topic}", {}), ("GET", "/topics", {})] * 4
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda call: timed(management, call[0], call[1], **call[2]), calls))
    zookeeper.start()
    expire_session(session, expired, zookeeper.connect)

    def answered_after_expiry() -> bool:
        answers.append(timed(management, "POST", "/groups", json=a_group()))
        return answers[-1][0].status_code == 201

    wait_until(answered_after_expiry, timeout=30)
    assert {response.status_code for response, _ in answers} <= {200, 201, 503}
    assert max(took for _, took in answers) < AT_ONCE

    created = api.create_topic()  # the frontend's cache hears of it from the change log's watch, set up anew
    cache = front.hermes.cache
    assert cache is not None
    wait_until(lambda: cache.topic(created) is not None, timeout=10)


def members(api: HermesClient) -> set[str]:
    return set(nodes(api.management))


def publish(api: HermesClient, topic: str, subscriber: SubscriberServer) -> int:
    """Publishes 5 messages and waits for the subscriber to have them; answers how many."""
    sent = set()
    for i in range(5):
        response = api.publish(topic, f'{{"n": {i}}}')
        assert response.status_code in (201, 202), response.text
        sent.add(response.headers["Hermes-Message-Id"])
    wait_until(lambda: sent <= {r.message_id for r in subscriber.received}, timeout=30)
    return len(sent)


def test_a_node_registers_anew_after_its_session_expired_and_sigterm_ends_it_within_seconds_with_zookeeper_silent(
    cluster: Cluster,
    front: InProcessHermes,
    api: HermesClient,
    zookeeper: OutageZookeeper,
    subscriber: SubscriberServer,
    tmp_path: Path,
) -> None:
    management = cluster.start(unique("m"), "management")
    node = unique("n")
    cluster.start(node, "consumers", "--consumer-commit-interval=60")  # offsets committed only when it stops
    topic = api.create_topic()
    name = api.create_subscription(topic, f"{subscriber.url}ok")
    wait_until(lambda: assigned(api.management).get(f"{topic}${name}") == [node], timeout=60)
    delivered = publish(api, topic, subscriber)

    # the node's session expires (paused past the session timeout): it registers anew, coordinates again (its
    # election znode went with the old session) and delivers on
    member = cluster.processes[node].process
    assert member is not None
    member.send_signal(signal.SIGSTOP)
    wait_until(lambda: node not in members(api), timeout=30)
    member.send_signal(signal.SIGCONT)

    def back() -> bool:
        listed = node in members(api) and assigned(api.management).get(f"{topic}${name}") == [node]
        return listed and coordinator(api.management) == node

    wait_until(back, timeout=30)
    delivered += publish(api, topic, subscriber)

    zookeeper.pause()
    processes = [management.process, cluster.processes[node].process]
    stopping = time.monotonic()
    for process in processes:
        assert process is not None
        process.send_signal(signal.SIGTERM)
    for process in processes:
        assert process is not None
        assert process.wait(60) == 0
    assert time.monotonic() - stopping < SHUTDOWN_WITHIN
    zookeeper.resume()

    admin = BrokerAdmin(front.hermes.connection)  # type: ignore[arg-type]
    committed = admin.committed_offsets(f"hermes_{topic}_{name}", topic)
    assert sum(committed.values()) == delivered == sum(admin.end_offsets(topic).values())

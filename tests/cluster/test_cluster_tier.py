"""Issue 33's cluster tier: three Kafka brokers (KRaft, replication factor 3, min.insync.replicas 2), a ZooKeeper
ensemble of three, two frontends, three consumer nodes and a management, each its own process. Under steady
publishing to an ack ALL topic through both frontends, the leader broker of a partition, the ZooKeeper leader and
a consumer node running the subscription are SIGKILLed in turn: no publisher gets a 5xx, and every message
answered 201 (the broker's in-sync replicas have it) or 202 (journaled on the frontend's disk first) reaches the
subscriber."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.cluster import Cluster, assigned, nodes
from tests.support.hermes import HermesClient, unique
from tests.support.kafka_cluster import KafkaCluster, ZookeeperEnsemble
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

PUBLISHERS = 4  # threads, half of them starting on each frontend
PUBLISH_INTERVAL = 0.04  # per thread: about 100 messages/s in all
STEADY = 2.0  # seconds of publishing before the first fault and after each
INFLIGHT_WINDOW = 100  # the consumers' window when a subscription sets no inflightSize
COMMIT_INTERVAL = 1.0  # --consumer-commit-interval's default
# what each of the three faults may deliver again: a commit interval of everything published, and a window
MOST_DUPLICATES = 3 * (PUBLISHERS / PUBLISH_INTERVAL * COMMIT_INTERVAL + INFLIGHT_WINDOW)
# kazoo gives each server of the connect string a third of the session timeout to answer: three times the other
# cluster tests' 2 s, for as long per server (2 s in all dropped connections and failed starts at load 40)
SESSION_TIMEOUT = "--cluster-session-timeout=6"


class Publishers:
    """Threads publishing steadily, each alternating between the frontends; every answer is kept."""

    def __init__(self, frontends: list[str], topic: str) -> None:
        self.frontends, self.topic = frontends, topic
        self.accepted: list[str] = []  # Hermes-Message-Id of each 201 and 202
        self.statuses: Counter[int] = Counter()
        self.failures: list[str] = []  # 5xx answers and requests that got no answer
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(PUBLISHERS)]

    def __enter__(self) -> Publishers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _run(self, first: int) -> None:
        with httpx.Client(timeout=30) as http:
            for n in itertools.count(first):
                if self._stop.wait(PUBLISH_INTERVAL):
                    return
                frontend = self.frontends[n % len(self.frontends)]
                try:
                    response = http.post(
                        f"{frontend}/topics/{self.topic}",
                        content=f'{{"publisher": {first}, "n": {n}}}',
                        headers={"Content-Type": "application/json"},
                    )
                except httpx.HTTPError as exc:
                    self.failures.append(f"{frontend}: {exc!r}")
                    continue
                with self._lock:
                    self.statuses[response.status_code] += 1
                if response.status_code in (201, 202):
                    self.accepted.append(response.headers["Hermes-Message-Id"])
                elif response.status_code >= 500:
                    self.failures.append(f"{frontend}: {response.status_code} {response.text}")


def answered(check: Callable[[], bool]) -> Callable[[], bool]:
    """``check`` as a condition to poll, false while management does not answer (its ZooKeeper electing)."""

    def condition() -> bool:
        try:
            return check()
        except AssertionError:  # nodes() got no 200
            return False

    return condition


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    running = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster")).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZookeeperEnsemble]:
    running = ZookeeperEnsemble(tmp_path_factory.mktemp("zookeeper-ensemble")).start()
    yield running
    running.stop()


@pytest.fixture
def cluster(tmp_path: Path, kafka_cluster: KafkaCluster, ensemble: ZookeeperEnsemble) -> Iterator[Cluster]:
    running = Cluster(tmp_path, kafka_cluster, ensemble, f"/{unique('tier')}")
    try:  # a start that fails must not leave the others running
        with ThreadPoolExecutor(6) as pool:  # at once: each waits for its own start only
            starts = [pool.submit(running.start, "m1", "management", SESSION_TIMEOUT)]
            starts += [pool.submit(running.start, name, "frontend", SESSION_TIMEOUT) for name in ("f1", "f2")]
            starts += [pool.submit(running.start, name, "consumers", SESSION_TIMEOUT) for name in ("n1", "n2", "n3")]
            for started in starts:
                started.result()
        yield running
    finally:
        running.stop()


def test_killing_a_leader_broker_a_zookeeper_server_and_a_consumer_node_loses_no_message(
    cluster: Cluster, kafka_cluster: KafkaCluster, ensemble: ZookeeperEnsemble, subscriber: SubscriberServer
) -> None:
    m1, f1, f2 = (cluster.processes[name] for name in ("m1", "f1", "f2"))
    client = HermesClient(m1.management_url, f1.frontend_url)
    try:
        wait_until(lambda: len(nodes(client.management)) == 3, timeout=60)
        topic = client.create_topic(ack="ALL")
        subscription = client.create_subscription(topic, subscriber.url)
        name = f"{topic}${subscription}"
        wait_until(lambda: len(assigned(client.management).get(name, [])) == 2, timeout=60)
        wait_until(lambda: client.publish(topic, "{}").status_code == 201, timeout=60)  # both partitions' leaders known

        with Publishers([f1.frontend_url, f2.frontend_url], topic) as publishers:
            time.sleep(STEADY)
            broker = kafka_cluster.leader(topic)
            kafka_cluster.kill(broker)
            wait_until(lambda: kafka_cluster.leader(topic) not in (-1, broker), timeout=30)
            time.sleep(STEADY)

            zookeeper = ensemble.leader()
            zookeeper.kill()
            wait_until(lambda: sorted(ensemble.modes()) == ["follower", "leader"], timeout=30)
            time.sleep(STEADY)

            wait_until(answered(lambda: len(assigned(client.management).get(name, [])) == 2), timeout=60)
            node = assigned(client.management)[name][0]
            cluster.kill(node)
            wait_until(
                answered(
                    lambda: node not in nodes(client.management) and len(assigned(client.management).get(name, [])) == 2
                ),
                timeout=60,
            )
            time.sleep(STEADY)
    finally:
        client.close()

    assert not publishers.failures, publishers.failures[:10]
    accepted = set(publishers.accepted)
    assert len(accepted) > 200, publishers.statuses

    def undelivered() -> set[str]:
        return accepted - {r.message_id for r in subscriber.received if r.message_id is not None}

    try:
        wait_until(lambda: not undelivered(), timeout=90)
    except AssertionError:
        lost = undelivered()
        example = sorted(lost)[:5]
        raise AssertionError(f"{len(lost)} of {len(accepted)} accepted messages never arrived: {example}") from None
    counts = Counter(r.message_id for r in subscriber.received if r.message_id in accepted)
    duplicates = sum(c - 1 for c in counts.values())
    print(f"published {dict(publishers.statuses)}, delivered {len(counts)}, duplicates {duplicates}")
    assert duplicates <= MOST_DUPLICATES

"""Issue 33: a rolling restart with nothing refused. Under a steady publishing rate, the management process, each
of two frontends and each of two consumer nodes is stopped with SIGTERM and started again, one at a time
(docs/cluster.md, Rolling restarts). The publishers reach the frontends as docs/cluster.md says: the next
frontend only when one refuses the connection, before anything was sent. No publish is refused or lost, and a
planned stop hands its subscriptions over without repeating a delivery."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from hermes.bench.zookeeper import ZookeeperServer
from hermes.broker.embedded import EmbeddedBroker
from tests.support.cluster import Cluster, assigned, nodes
from tests.support.hermes import HermesClient, unique
from tests.support.publisher import Publisher
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

PUBLISH_RATE = 20  # messages/s
SHUTDOWN_WAIT = 1.0  # --frontend-shutdown-wait: /status/ready answers 503 this long before the port closes


@pytest.fixture
def cluster(tmp_path: Path, kafka: EmbeddedBroker, zookeeper: ZookeeperServer) -> Iterator[Cluster]:
    running = Cluster(tmp_path, kafka, zookeeper, f"/{unique('cluster')}")
    yield running
    running.stop()


def test_a_rolling_restart_under_load_refuses_and_loses_nothing(cluster: Cluster, subscriber: SubscriberServer) -> None:
    wait = f"--frontend-shutdown-wait={SHUTDOWN_WAIT}"
    starts = {"m1": ("management",), "f1": ("frontend", wait), "f2": ("frontend", wait)}
    starts |= {node: ("consumers",) for node in ("n1", "n2")}
    with ThreadPoolExecutor(len(starts)) as pool:  # at once: each start waits for its process to answer
        m1, f1, f2, *_ = pool.map(lambda item: cluster.start(item[0], *item[1]), starts.items())
    client = HermesClient(m1.management_url, f1.frontend_url)
    try:
        management = client.management
        topic = client.create_topic()
        shared, single = unique("shared"), unique("single")
        response = management.put(
            "/workload-constraints/subscription",
            json={"subscriptionName": f"{topic}${single}", "constraints": {"consumersNumber": 1}},
        )
        assert response.status_code == 201, response.text
        for name in (shared, single):
            client.create_subscription(topic, f"{subscriber.url}{name}", name)
        wanted = {f"{topic}${shared}": 2, f"{topic}${single}": 1}

        def settled() -> bool:
            return {s: len(n) for s, n in assigned(management).items()} == wanted

        wait_until(settled, timeout=60)
        frontends = [f1.frontend_url, f2.frontend_url]
        publisher = Publisher(frontends, topic, PUBLISH_RATE).start()
        try:
            time.sleep(1)  # a steady load before the first stop
            cluster.processes["m1"].stop()  # nothing on the messages' path
            cluster.restart("m1")
            for name, url in zip(("f1", "f2"), frontends, strict=True):
                process = cluster.processes[name]
                assert process.process is not None
                process.process.terminate()
                # not ready first, while it publishes on (the publisher meets no 503), then the port closes
                wait_until(lambda url=url: _ready(url) == 503, timeout=10, interval=0.05)
                assert process.stop() == 0
                cluster.restart(name)
                wait_until(lambda url=url: _ready(url) == 200, timeout=30)
            for node in ("n1", "n2"):
                assert cluster.processes[node].stop() == 0
                alone = dict.fromkeys(wanted, 1)  # the other node runs both

                def handed_over(node: str = node, alone: dict[str, int] = alone) -> bool:
                    left = node not in nodes(management)
                    return left and {s: len(n) for s, n in assigned(management).items()} == alone

                wait_until(handed_over, timeout=60)
                cluster.restart(node)
                wait_until(settled, timeout=60)
            time.sleep(1)
        finally:
            publisher.stop()

        assert publisher.failures == []
        accepted = set(publisher.accepted)
        assert len(accepted) > 100
        paths = (f"/{shared}", f"/{single}")

        def everything_delivered() -> bool:
            got = {(r.path, r.message_id) for r in subscriber.received}
            return all((path, id_) in got for path in paths for id_ in accepted)

        wait_until(everything_delivered, timeout=90)
        duplicates = {
            path: sum(c - 1 for c in Counter(r.message_id for r in subscriber.received if r.path == path).values())
            for path in paths
        }
        assert duplicates == dict.fromkeys(paths, 0)
    finally:
        client.close()


def _ready(url: str) -> int:
    try:
        return httpx.get(f"{url}/status/ready", timeout=2).status_code
    except httpx.HTTPError:
        return 0

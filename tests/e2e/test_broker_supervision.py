"""``hermes run`` keeps its embedded Kafka broker running: a broker that dies is reaped, reported by health and
started again on its port, which no client retrying it meanwhile can take, and what the frontend accepted while
it was down is delivered."""

from __future__ import annotations

import os
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.hermes import HermesClient, HermesProcess
from tests.support.ports import connect_to_itself, connectable_port
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

EXITED = "the embedded Kafka broker exited with signal SIGKILL"
ADMIN_TIMEOUT = 3  # seconds a management request to the group's coordinator waits
DOWN = 8  # seconds the broker stays down: longer than that request, the publishes and the port's check beside it


def test_a_killed_broker_is_restarted_on_its_port_and_what_was_accepted_meanwhile_is_delivered(
    tmp_path: Path,
) -> None:
    subscriber = SubscriberServer().start()
    port = connectable_port()  # in the ephemeral range: one a client retrying it could be given as its own end
    # Held by a connection to itself when Hermes starts (as a client of the last run's broker can leave it): the
    # start waits until it is gone instead of refusing to start
    holder = connect_to_itself(port)
    hermes = HermesProcess(
        tmp_path / "data",
        "--kafka-admin-timeout",
        str(ADMIN_TIMEOUT),
        "--embedded-broker-restart-backoff",
        str(DOWN),
        kafka_port=port,
        env={"HERMES_FRONTEND_ACK_LEADER_TIMEOUT": "200"},  # publishes while the broker is down are answered soon
    )
    waited = f"port 127.0.0.1:{port} is held by a connection"
    release = threading.Thread(target=_close_once_logged, args=(holder, hermes, waited))
    release.start()
    hermes.start()
    release.join()
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        assert waited in hermes.log()
        topic = client.create_topic()
        name = client.create_subscription(topic, subscriber.url)
        accepted = [_publish(client, topic, 0).headers["Hermes-Message-Id"]]
        subscriber.wait_for(1, timeout=30)

        assert hermes.process is not None
        broker = _broker_pid(hermes.process.pid)
        os.kill(broker, signal.SIGKILL)
        wait_until(lambda: not Path(f"/proc/{broker}").exists(), timeout=10)  # reaped: no zombie left
        down = client.management.get("/status/health")
        assert down.status_code == 503
        assert down.json()["status"] == "DOWN"
        assert EXITED in down.json()["problems"][0]
        # a request to the group's coordinator times out with no broker up: librdkafka aborted the process when the
        # broker came back, unless Hermes destroyed the client first
        groups_path = f"/topics/{topic}/subscriptions/{name}/consumer-groups"
        pool = ThreadPoolExecutor(1)
        groups = pool.submit(client.management.get, groups_path)  # beside the checks below, while the broker is down
        for path in ("/status/health", "/status/ready"):
            response = client.frontend.get(path)
            assert response.status_code == 503
            assert EXITED in response.text
        meanwhile = [_publish(client, topic, n) for n in range(1, 6)]
        assert [r.status_code for r in meanwhile] == [202] * 5  # journaled
        accepted += [r.headers["Hermes-Message-Id"] for r in meanwhile]
        with pytest.raises(AssertionError, match="no connection to itself"):  # without the port kept, 14,000 do
            connect_to_itself(port, attempts=40_000)
        assert groups.result().status_code == 503, groups.result().text
        pool.shutdown()
        assert _status(hermes.management_url) == 503, "the broker came back before the checks of its absence ended"

        wait_until(lambda: _status(hermes.management_url) == 200, timeout=60)
        assert _status(hermes.frontend_url) == 200
        wait_until(lambda: set(accepted) <= {r.message_id for r in subscriber.received}, timeout=60)
        assert EXITED in hermes.log()
        assert "the embedded Kafka broker runs again" in hermes.log()
    finally:
        client.close()
        assert hermes.stop() == 0
        subscriber.stop()


def _close_once_logged(holder: socket.socket, hermes: HermesProcess, line: str) -> None:
    try:
        wait_until(lambda: line in hermes.log(), timeout=60)
    finally:
        holder.close()


def _publish(client: HermesClient, topic: str, n: int) -> httpx.Response:
    response = client.publish(topic, f'{{"n": {n}}}')
    assert response.status_code in (201, 202), response.text
    return response


def _broker_pid(hermes: int) -> int:
    """The embedded broker: the child of ``hermes`` that runs Kafka."""
    tasks = Path(f"/proc/{hermes}/task").iterdir()
    children = [int(pid) for task in tasks for pid in (task / "children").read_text().split()]
    return next(pid for pid in children if b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes())


def _status(base_url: str) -> int:
    try:
        return httpx.get(f"{base_url}/status/health", timeout=2).status_code
    except httpx.HTTPError:
        return 0

"""What ``hermes run`` keeps across a crash: its embedded Kafka broker dies with it and stores messages in the data
directory, and every subscription resumes from its committed position."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.hermes import HermesClient, HermesProcess, alive, children
from tests.support.subscriber import Received, Reply, SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


def test_a_sigkilled_run_loses_nothing_and_resumes_from_the_committed_position(tmp_path: Path) -> None:
    up = True
    subscriber = SubscriberServer(lambda _n, _r: Reply(200 if up else 503)).start()
    data_dir = tmp_path / "data"
    hermes = HermesProcess(data_dir).start()
    assert hermes.process is not None
    broker = children(hermes.process.pid)
    assert broker, "the embedded broker runs as a child process"
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        topic = client.create_topic()
        name = client.create_subscription(topic, subscriber.url)
        delivered_before = [_publish(client, topic, n) for n in range(10)]
        subscriber.wait_for(10, timeout=30)
        metrics = f"/topics/{topic}/subscriptions/{name}/metrics"
        wait_until(lambda: int(client.management.get(metrics).json()["lag"]) == 0, timeout=60)  # committed

        up = False  # the endpoint goes down; what is published now waits in Kafka
        accepted = [_publish(client, topic, n) for n in range(10, 40)]
    finally:
        client.close()
        hermes.stop(signal.SIGKILL)  # the crash under test, and no process left behind when the test failed
    wait_until(lambda: not any(alive(pid) for pid in broker), timeout=10)  # the embedded broker dies with it

    up = True
    before_restart = len(subscriber.received)  # the attempts the down endpoint refused do not count
    restarted = HermesProcess(data_dir).start()
    client = HermesClient(restarted.management_url, restarted.frontend_url)
    try:
        wait_until(lambda: set(accepted) <= _delivered(subscriber.received[before_restart:]), timeout=60)
        redelivered = set(delivered_before) & _delivered(subscriber.received[before_restart:])
        assert redelivered == set(), "messages committed before the crash were delivered again"
        assert client.management.get(f"/topics/{topic}").status_code == 200
    finally:
        client.close()
        assert restarted.stop() == 0
        subscriber.stop()


def _publish(client: HermesClient, topic: str, n: int) -> str:
    response = client.publish(topic, f'{{"n": {n}}}')
    assert response.status_code in (201, 202), response.text  # 202: journaled, re-sent until the broker has it
    return response.headers["Hermes-Message-Id"]


def _delivered(received: list[Received]) -> set[str]:
    return {r.message_id for r in received if r.message_id is not None}

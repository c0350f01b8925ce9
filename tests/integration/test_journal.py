"""No message that got a 201 or 202 is lost: broker outage plus a SIGKILL of the frontend."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.domain.message import Message
from hermes.runtime import Role
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, HermesProcess, InProcessHermes, hermes_settings, unique

pytestmark = pytest.mark.integration


def _read_all(hermes: InProcessHermes, topic: str, count: int, timeout: float = 30) -> dict[str, Message]:
    assert hermes.hermes.connection is not None
    partitions = BrokerAdmin(hermes.hermes.connection).partitions(topic)
    consumer = BrokerConsumer(hermes.hermes.connection, unique("reader"), auto_offset_reset="earliest")
    consumer.assign({(topic, p): 0 for p in partitions})
    found: dict[str, Message] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            for message in consumer.poll(500, 0.2):
                found[message.message_id] = message
    finally:
        consumer.close()
    return found


class _Outage:
    """A broker of its own (to pause), management in-process and a frontend process that can be killed."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.broker = EmbeddedBroker(tmp_path / "kafka")
        self.broker.start()
        self.management = InProcessHermes(
            hermes_settings(tmp_path, self.broker.bootstrap_servers), frozenset({Role.MANAGEMENT})
        ).start()
        self.frontend = self.start_frontend()
        self.client = HermesClient(self.management.management_url, self.frontend.frontend_url)

    def start_frontend(self) -> HermesProcess:
        # one worker: one journal, the one the metrics read (each worker of a frontend keeps its own)
        args = ("--kafka-bootstrap-servers", self.broker.bootstrap_servers, "--metadata-poll-interval", "0.05")
        args += ("--workers", "1")
        return HermesProcess(self.tmp_path, *args, command="frontend").start(wait_for="frontend")

    def close(self) -> None:
        self.broker.resume()
        self.frontend.stop()
        self.client.close()
        self.management.stop()
        self.broker.stop()


def _journaled(client: HermesClient) -> float:
    """The frontend's hermes_frontend_journal_messages: messages answered 202 that the broker has not acknowledged."""
    metrics = client.frontend.get("/status/prometheus").text.splitlines()
    return float(next(line for line in metrics if line.startswith("hermes_frontend_journal_messages ")).split()[1])


@pytest.fixture
def outage(tmp_path: Path) -> Iterator[_Outage]:
    rig = _Outage(tmp_path)
    yield rig
    rig.close()


def test_accepted_messages_survive_a_broker_outage_and_a_killed_frontend(outage: _Outage) -> None:
    broker, client = outage.broker, outage.client
    accepted: dict[str, tuple[bytes, str]] = {}
    topic = client.create_topic()

    def publish(i: int) -> int:
        body, key = f'{{"n": {i}}}'.encode(), f"key-{i % 3}"
        response = client.publish(topic, body, headers={"Partition-Key": key, "Trace-Id": f"trace-{i}"})
        if response.status_code in (201, 202):
            accepted[response.headers["Hermes-Message-Id"]] = (body, key)
        return response.status_code

    # before the outage: a 202 too when the broker's ack takes over its 1 s on a busy machine, then acknowledged
    assert all(publish(i) in (201, 202) for i in range(5))
    wait_until(lambda: _journaled(client) == 0.0, 30, 0.1)
    broker.pause()  # SIGSTOP: the broker stops answering
    with ThreadPoolExecutor(20) as pool:  # at once: each waits out the broker's ack timeout (1 s) for its 202
        statuses = list(pool.map(publish, range(5, 25)))
    assert statuses.count(202) == 20, statuses
    metrics = client.frontend.get("/status/prometheus").text
    assert "hermes_frontend_journal_messages 20.0" in metrics
    assert "hermes_frontend_journal_bytes 175.0" in metrics  # the twenty bodies of n = 5..24
    outage.frontend.stop(signal.SIGKILL)
    broker.resume()
    outage.frontend = outage.start_frontend()

    found = _read_all(outage.management, topic, len(accepted))
    assert set(accepted) <= set(found), f"lost {len(set(accepted) - set(found))} accepted messages"
    for message_id, (body, key) in accepted.items():
        message = found[message_id]
        assert (message.body, message.key) == (body, key.encode())
        assert message.propagated_headers["Trace-Id"].startswith("trace-")


def test_an_ack_after_the_202_clears_the_journal(outage: _Outage) -> None:
    """The broker acknowledges the 202'd messages once it answers again: the journal lets go of them."""
    broker, client = outage.broker, outage.client

    topic = client.create_topic()
    assert client.publish(topic, '{"n": 0}').status_code in (201, 202)
    wait_until(lambda: _journaled(client) == 0.0, 30, 0.1)
    broker.pause()
    with ThreadPoolExecutor(5) as pool:  # at once: each waits out the broker's ack timeout (1 s) for its 202
        responses = list(pool.map(lambda i: client.publish(topic, f'{{"n": {i}}}'), range(1, 6)))
    assert all(response.status_code == 202 for response in responses), [r.text for r in responses]
    accepted = [response.headers["Hermes-Message-Id"] for response in responses]
    assert _journaled(client) == 5.0
    broker.resume()
    wait_until(lambda: _journaled(client) == 0.0, 60, 0.2)
    assert set(accepted) <= set(_read_all(outage.management, topic, 6))

"""No message that got a 201 or 202 is lost: broker outage plus a SIGKILL of the frontend."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.consumer import BrokerConsumer
from hermes.broker.embedded import EmbeddedBroker
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


def test_accepted_messages_survive_a_broker_outage_and_a_killed_frontend(tmp_path: Path) -> None:
    broker = EmbeddedBroker(log_dir=tmp_path / "tansu")
    broker.start()
    management = InProcessHermes(
        hermes_settings(tmp_path, broker.bootstrap_servers), frozenset({Role.MANAGEMENT})
    ).start()
    frontend_args = ("--kafka-bootstrap-servers", broker.bootstrap_servers, "--metadata-poll-interval", "0.05")
    frontend = HermesProcess(tmp_path, *frontend_args, command="frontend").start(wait_for="frontend")
    client = HermesClient(management.management_url, frontend.frontend_url)
    accepted: dict[str, tuple[bytes, str]] = {}
    try:
        topic = client.create_topic()

        def publish(i: int) -> int:
            body, key = f'{{"n": {i}}}'.encode(), f"key-{i % 3}"
            response = client.publish(topic, body, headers={"Partition-Key": key, "Trace-Id": f"trace-{i}"})
            if response.status_code in (201, 202):
                accepted[response.headers["Hermes-Message-Id"]] = (body, key)
            return response.status_code

        assert [publish(i) for i in range(5)] == [201] * 5
        broker.pause()  # SIGSTOP: the broker stops answering
        statuses = [publish(i) for i in range(5, 25)]
        assert statuses.count(202) == 20, statuses
        metrics = client.frontend.get("/status/prometheus").text
        assert "hermes_frontend_journal_messages 20.0" in metrics
        assert "hermes_frontend_journal_bytes 175.0" in metrics  # the twenty bodies of n = 5..24
        frontend.stop(signal.SIGKILL)
        broker.resume()
        frontend = HermesProcess(tmp_path, *frontend_args, command="frontend").start(wait_for="frontend")

        found = _read_all(management, topic, len(accepted))
        assert set(accepted) <= set(found), f"lost {len(set(accepted) - set(found))} accepted messages"
        for message_id, (body, key) in accepted.items():
            message = found[message_id]
            assert (message.body, message.key) == (body, key.encode())
            assert message.propagated_headers["Trace-Id"].startswith("trace-")
    finally:
        broker.resume()
        frontend.stop()
        client.close()
        management.stop()
        broker.stop()


def test_an_ack_after_the_202_clears_the_journal(tmp_path: Path) -> None:
    """The broker acknowledges the 202'd messages once it answers again: the journal lets go of them."""
    broker = EmbeddedBroker(log_dir=tmp_path / "tansu")
    broker.start()
    management = InProcessHermes(
        hermes_settings(tmp_path, broker.bootstrap_servers), frozenset({Role.MANAGEMENT})
    ).start()
    frontend_args = ("--kafka-bootstrap-servers", broker.bootstrap_servers, "--metadata-poll-interval", "0.05")
    frontend = HermesProcess(tmp_path, *frontend_args, command="frontend").start(wait_for="frontend")
    client = HermesClient(management.management_url, frontend.frontend_url)

    def journaled() -> str:
        return next(
            line
            for line in client.frontend.get("/status/prometheus").text.splitlines()
            if line.startswith("hermes_frontend_journal_messages ")
        )

    try:
        topic = client.create_topic()
        assert client.publish(topic, '{"n": 0}').status_code == 201
        broker.pause()
        accepted = []
        for i in range(1, 6):
            response = client.publish(topic, f'{{"n": {i}}}')
            assert response.status_code == 202, response.text
            accepted.append(response.headers["Hermes-Message-Id"])
        assert journaled() == "hermes_frontend_journal_messages 5.0"
        broker.resume()
        wait_until(lambda: journaled() == "hermes_frontend_journal_messages 0.0", 60, 0.2)
        assert set(accepted) <= set(_read_all(management, topic, 6))
    finally:
        broker.resume()
        frontend.stop()
        client.close()
        management.stop()
        broker.stop()

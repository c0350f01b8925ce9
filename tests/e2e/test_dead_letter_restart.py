"""Dead letters across crashes of ``hermes run``: a SIGKILL while a subscription discards loses no dead letter (a
message whose dead letter was not acknowledged before the kill is not committed, so it is discarded again), and a
SIGKILL during a redrive leaves it to finish after the restart, from the position it had written: every message
is delivered, and only those of the last moment before the kill twice. The runs use the session's broker, which
outlives them (a SIGKILLed embedded broker takes some 25 s to recover its log here)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from hermes.broker.embedded import EmbeddedBroker
from tests.support.hermes import HermesClient, HermesProcess
from tests.support.subscriber import Reply, SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

MESSAGES = 30
RATE = 10  # messages a second: 3 s of discards, and of redelivery, for the kills to come in their midst
# Deliveries a redrive may repeat after a kill: what it sent after its last position write (every 0.5 s)
WINDOW = 12


def test_sigkills_while_discarding_and_while_redriving_lose_nothing(tmp_path: Path, kafka: EmbeddedBroker) -> None:
    fixed = False
    subscriber = SubscriberServer(lambda _n, _r: Reply(200 if fixed else 400)).start()
    data_dir = tmp_path / "data"
    broker = ("--kafka-bootstrap-servers", kafka.bootstrap_servers)
    hermes = HermesProcess(data_dir, *broker).start()
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        topic = client.create_topic()
        on, policy = {"enabled": True}, {"rate": RATE}
        name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy, deadLetters=on)
        published = [_publish(client, topic, n) for n in range(MESSAGES)]
        wait_until(lambda: _letters(client, topic, name), timeout=60)
        before_kill = len(_letters(client, topic, name))
    finally:
        client.close()
        hermes.stop(signal.SIGKILL)
    assert before_kill < MESSAGES, "the kill came after every discard: it tests nothing"

    hermes = HermesProcess(data_dir, *broker).start()
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        wait_until(lambda: set(published) <= {letter["messageId"] for letter in _letters(client, topic, name)}, 60)
        letters = len(_letters(client, topic, name))  # a message's dead letter may be there twice
        fixed, fixed_at = True, len(subscriber.received)
        redrive = client.management.post(f"/topics/{topic}/subscriptions/{name}/dead-letters/redrive", json={})
        assert redrive.status_code == 202, redrive.text
        wait_until(lambda: len(subscriber.received) - fixed_at >= MESSAGES * 2 // 3, timeout=60)
    finally:
        client.close()
        hermes.stop(signal.SIGKILL)
    assert len(subscriber.received) - fixed_at < letters, "the kill came after the whole redrive: it tests nothing"

    hermes = HermesProcess(data_dir, *broker).start()
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        path = f"/topics/{topic}/subscriptions/{name}/dead-letters/redrives"
        wait_until(lambda: client.management.get(path).json()[0]["status"] == "DONE", timeout=60)
        redelivered = [r.message_id for r in subscriber.received[fixed_at:]]
        assert set(published) <= set(redelivered)
        assert len(redelivered) <= letters + WINDOW, "the redrive started over after the kill"
    finally:
        client.close()
        assert hermes.stop() == 0
        subscriber.stop()


def _publish(client: HermesClient, topic: str, n: int) -> str:
    response = client.publish(topic, f'{{"n": {n}}}')
    assert response.status_code in (201, 202), response.text
    return response.headers["Hermes-Message-Id"]


def _letters(client: HermesClient, topic: str, name: str) -> list[dict[str, Any]]:
    response = client.management.get(f"/topics/{topic}/subscriptions/{name}/dead-letters", params={"limit": 1000})
    assert response.status_code == 200, response.text
    letters: list[dict[str, Any]] = response.json()
    return letters

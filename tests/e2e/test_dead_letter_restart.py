"""Dead letters across a crash of ``hermes run``: a SIGKILL while a subscription discards loses no dead letter (a
message whose dead letter was not acknowledged before the kill is not committed, so it is discarded again)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.hermes import HermesClient, HermesProcess
from tests.support.subscriber import Reply, SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

MESSAGES = 30


def test_a_sigkill_while_discarding_loses_no_dead_letter(tmp_path: Path) -> None:
    subscriber = SubscriberServer(lambda _n, _r: Reply(400)).start()
    data_dir = tmp_path / "data"
    hermes = HermesProcess(data_dir).start()
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        topic = client.create_topic()
        policy = {"rate": 10}  # 3 s of discards: the kill comes in their midst
        on = {"deadLetters": {"enabled": True}}
        name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy, **on)
        published = [_publish(client, topic, n) for n in range(MESSAGES)]
        wait_until(lambda: _dead_lettered_ids(client, topic, name), timeout=60)
        before_kill = len(_dead_lettered_ids(client, topic, name))
    finally:
        client.close()
        hermes.stop(signal.SIGKILL)
    assert before_kill < MESSAGES, "the kill came after every discard: it tests nothing"

    restarted = HermesProcess(data_dir).start()
    client = HermesClient(restarted.management_url, restarted.frontend_url)
    try:
        wait_until(lambda: set(published) <= set(_dead_lettered_ids(client, topic, name)), timeout=60)
    finally:
        client.close()
        assert restarted.stop() == 0
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


def _dead_lettered_ids(client: HermesClient, topic: str, name: str) -> list[str]:
    return [letter["messageId"] for letter in _letters(client, topic, name)]

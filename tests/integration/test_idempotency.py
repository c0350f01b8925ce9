"""Idempotent publishing against the real broker: a repeated Idempotency-Key is answered as its first publish and
produces nothing, within the topic's window, across a frontend restart and between frontends."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from hermes import client as hermes_client
from hermes.broker.admin import BrokerAdmin
from hermes.broker.embedded import EmbeddedBroker
from hermes.runtime import Role
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes, hermes_settings, unique

pytestmark = pytest.mark.integration

KEY = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
ID = "Hermes-Message-Id"


def produced(hermes: InProcessHermes, topic: str) -> int:
    """How many records the topic's Kafka topic holds."""
    assert hermes.hermes.connection is not None
    return sum(BrokerAdmin(hermes.hermes.connection).end_offsets(topic).values())


def test_a_repeat_is_answered_as_the_first_and_produces_nothing(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic()
    key = unique("order-")
    first = client.publish(topic, '{"order": 1}', {KEY: key})
    assert first.status_code == 201 and REPLAYED not in first.headers
    repeat = client.publish(topic, '{"order": 1}', {KEY: key})
    assert repeat.status_code == 201
    assert repeat.headers[ID] == first.headers[ID] and repeat.headers[REPLAYED] == "true"
    assert produced(hermes, topic) == 1
    # the key is the topic's: on another topic it is a new message
    other = client.create_topic()
    elsewhere = client.publish(other, '{"order": 1}', {KEY: key})
    assert elsewhere.status_code == 201 and elsewhere.headers[ID] != first.headers[ID]
    assert REPLAYED not in elsewhere.headers


def test_the_python_client_publishes_with_a_key(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic()
    connection = hermes_client.Connection(hermes.management_url, hermes.frontend_url)
    with hermes_client.HermesClient(connection) as publisher:
        first = publisher.publish(topic, {"order": 7}, idempotency_key="order-7")
        again = publisher.publish(topic, {"order": 7}, idempotency_key="order-7")
    assert first.status == again.status == 201 and not first.replayed
    assert again.replayed and again.message_id == first.message_id
    assert produced(hermes, topic) == 1


def test_the_same_key_with_another_body_is_422(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic()
    key = unique("order-")
    assert client.publish(topic, '{"order": 1}', {KEY: key}).status_code == 201
    other = client.publish(topic, '{"order": 2}', {KEY: key})
    assert other.status_code == 422
    assert other.json()["code"] == "IDEMPOTENCY_KEY_REUSED" and other.json()["message"].startswith(KEY)
    assert produced(hermes, topic) == 1


def test_a_body_spooled_to_disk_is_told_apart_too(hermes: InProcessHermes, client: HermesClient) -> None:
    """Over 1 MiB a body arrives in a file, and its digest is taken in a thread."""
    topic = client.create_topic(maxMessageSize=2 * 1024 * 1024)
    body = b'{"data": "' + b"x" * 1_500_000 + b'"}'
    first = client.publish(topic, body, {KEY: "big"})
    assert first.status_code == 201, first.text
    repeat = client.publish(topic, body, {KEY: "big"})
    assert repeat.headers.get(REPLAYED) == "true" and repeat.headers[ID] == first.headers[ID]
    other = client.publish(topic, body.replace(b"xx", b"yy", 1), {KEY: "big"})
    assert other.status_code == 422, other.text
    assert produced(hermes, topic) == 1


@pytest.mark.parametrize("key", ["", "k" * 256, "tab\there"])
def test_a_bad_key_is_400_naming_the_header(client: HermesClient, key: str) -> None:
    topic = client.create_topic()
    refused = client.publish(topic, "{}", {KEY: key})
    assert refused.status_code == 400 and refused.json()["message"].startswith(f"{KEY}:"), refused.text


def test_repeats_in_flight_together_wait_for_the_first(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic()
    key = unique("order-")
    answers: list[httpx.Response] = []
    start = threading.Barrier(4)

    def publish() -> None:
        with httpx.Client(base_url=hermes.frontend_url, timeout=30) as own:
            start.wait()
            answers.append(own.post(f"/topics/{topic}", content=b'{"order": 1}', headers={KEY: key}))

    threads = [threading.Thread(target=publish) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [a.status_code for a in answers] == [201] * 4
    assert len({a.headers[ID] for a in answers}) == 1
    assert sum(REPLAYED in a.headers for a in answers) == 3
    assert produced(hermes, topic) == 1


def test_a_key_is_forgotten_after_the_topics_window(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic(idempotencyWindow={"duration": 1, "retentionUnit": "SECONDS"})
    key = unique("order-")
    first = client.publish(topic, "{}", {KEY: key})
    assert first.status_code == 201

    def published_anew() -> bool:
        again = client.publish(topic, "{}", {KEY: key})
        return REPLAYED not in again.headers and again.headers[ID] != first.headers[ID]

    wait_until(published_anew, timeout=10, interval=0.2)
    assert produced(hermes, topic) == 2


def test_the_window_is_a_topic_setting(client: HermesClient) -> None:
    topic = client.create_topic()
    shown = client.management.get(f"/topics/{topic}").json()
    assert shown["idempotencyWindow"] == {"duration": 24, "retentionUnit": "HOURS"}
    changed = client.management.put(
        f"/topics/{topic}", json={"idempotencyWindow": {"duration": 30, "retentionUnit": "MINUTES"}}
    )
    assert changed.status_code == 200, changed.text
    assert client.management.get(f"/topics/{topic}").json()["idempotencyWindow"]["duration"] == 30
    too_long = client.management.put(
        f"/topics/{topic}", json={"idempotencyWindow": {"duration": 8, "retentionUnit": "DAYS"}}
    )
    assert too_long.status_code == 400 and too_long.json()["message"].startswith("idempotencyWindow"), too_long.text
    bad_unit = client.management.put(
        f"/topics/{topic}", json={"idempotencyWindow": {"duration": 1, "retentionUnit": "WEEKS"}}
    )
    assert bad_unit.status_code == 400 and "idempotencyWindow" in bad_unit.json()["message"], bad_unit.text


def test_keys_are_known_to_another_frontend_and_after_a_restart(
    hermes: InProcessHermes, client: HermesClient, kafka: EmbeddedBroker, tmp_path: Path
) -> None:
    """A second Hermes frontend on the same Kafka cluster (with the same topic in its own metadata store)."""
    topic = client.create_topic()
    first = client.publish(topic, '{"n": 1}', {KEY: "k1"})
    assert first.status_code == 201

    def start_other() -> tuple[InProcessHermes, HermesClient]:
        settings = hermes_settings(tmp_path, kafka.bootstrap_servers)
        other = InProcessHermes(settings, frozenset({Role.FRONTEND, Role.MANAGEMENT})).start()
        return other, HermesClient(other.management_url, other.frontend_url)

    other, other_client = start_other()
    try:
        other_client.create_topic(other_client.create_group(topic.split(".")[0]) + topic[topic.index(".") :])
        # known at start: read from hermes.idempotency before the other frontend served
        repeat = other_client.publish(topic, '{"n": 1}', {KEY: "k1"})
        assert repeat.headers.get(REPLAYED) == "true" and repeat.headers[ID] == first.headers[ID]
        second = other_client.publish(topic, '{"n": 2}', {KEY: "k2"})
        assert second.status_code == 201 and REPLAYED not in second.headers
    finally:
        other_client.close()
        other.stop()
    # learnt while serving: the first frontend follows hermes.idempotency
    assert hermes.hermes.frontend is not None and hermes.hermes.frontend.idempotency is not None
    wait_until(lambda: f"{topic}/k2" in hermes.hermes.frontend.idempotency)
    known = client.publish(topic, '{"n": 2}', {KEY: "k2"})
    assert known.headers.get(REPLAYED) == "true" and known.headers[ID] == second.headers[ID]

    restarted, restarted_client = start_other()
    try:
        again = restarted_client.publish(topic, '{"n": 2}', {KEY: "k2"})
        assert again.headers.get(REPLAYED) == "true" and again.headers[ID] == second.headers[ID]
    finally:
        restarted_client.close()
        restarted.stop()
    assert produced(hermes, topic) == 2

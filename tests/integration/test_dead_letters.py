"""Dead letters against the real broker and real subscribers: what a subscription with the policy on discards is
written to its dead-letter topic (a 4xx not retried, the messageTtl's end), listed, shown, purged and redriven
through the management API; a write the broker refuses holds the message's offset back until it succeeds."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.records import read_records
from hermes.domain.dead_letter import dead_letter_topic
from hermes.domain.names import SubscriptionName, TopicName
from hermes.management import openapi
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Received, Reply, SubscriberServer, always

pytestmark = pytest.mark.integration

ON = {"deadLetters": {"enabled": True}}
COMPONENTS = openapi.document()["components"]


def conforms(answer: Any, schema: str) -> None:
    """``answer`` is what the OpenAPI document says of the ``schema`` component (a list of them for ``[schema]``)."""
    one = {"$ref": f"#/components/schemas/{schema.strip('[]')}"}
    jsonschema.validate(
        answer, {**({"type": "array", "items": one} if schema[0] == "[" else one), "components": COMPONENTS}
    )


@pytest.fixture
def rejecting() -> Iterator[SubscriberServer]:
    server = SubscriberServer(always(400)).start()
    yield server
    server.stop()


@pytest.fixture
def admin(hermes: InProcessHermes) -> BrokerAdmin:
    return BrokerAdmin(KafkaConnection(hermes.hermes.settings.kafka_bootstrap_servers))


def dead_letters(client: HermesClient, topic: str, name: str, **query: Any) -> list[dict[str, Any]]:
    response = client.management.get(f"/topics/{topic}/subscriptions/{name}/dead-letters", params=query)
    assert response.status_code == 200, response.text
    letters: list[dict[str, Any]] = response.json()
    return letters


def published(client: HermesClient, topic: str, body: str) -> str:
    response = client.publish(topic, body)
    assert response.status_code in (201, 202), response.text
    return response.headers["Hermes-Message-Id"]


def test_a_rejected_message_becomes_a_dead_letter_with_why_and_what(
    hermes: InProcessHermes, client: HermesClient, rejecting: SubscriberServer
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, rejecting.url, **ON)
    assert client.management.get(f"/topics/{topic}/subscriptions/{name}").json()["deadLetters"] == {"enabled": True}
    ids = [published(client, topic, f'{{"n": {i}}}') for i in range(3)]
    wait_until(lambda: len(dead_letters(client, topic, name)) == 3, timeout=20)
    letters = dead_letters(client, topic, name)
    conforms(letters, "[DeadLetter]")
    assert sorted(letter["messageId"] for letter in letters) == sorted(ids)
    first = letters[0]
    assert first["lastStatus"] == 400 and first["attempts"] == 1 and "400" in first["reason"]
    assert first["topicName"] == topic and first["bodyEncoding"] == "utf-8" and not first["offloaded"]
    assert first["body"] in {f'{{"n": {i}}}' for i in range(3)}
    assert first["headers"]["hermes-message-id"] == first["messageId"]
    assert [int(letter["id"]) for letter in letters] == [0, 1, 2]  # offsets of the dead-letter topic
    shown = client.management.get(f"/topics/{topic}/subscriptions/{name}/dead-letters/{letters[1]['id']}")
    assert shown.status_code == 200 and shown.json() == letters[1]
    assert dead_letters(client, topic, name, limit=2) == letters[:2]
    missing = client.management.get(f"/topics/{topic}/subscriptions/{name}/dead-letters/3")
    assert (missing.status_code, missing.json()["code"]) == (404, "DEAD_LETTER_NOT_EXISTS")
    unknown = client.management.get(f"/topics/{topic}/subscriptions/unknown/dead-letters")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "SUBSCRIPTION_NOT_EXISTS")

    def counted() -> bool:
        metrics = client.management.get(f"/topics/{topic}/subscriptions/{name}/metrics").json()
        return bool(metrics["totals"]["deadLettered"] == 3)

    wait_until(counted, timeout=10)
    prometheus = httpx.get(f"{hermes.management_url}/status/prometheus", timeout=10).text
    assert f'hermes_consumers_dead_lettered_total{{subscription="{name}",topic="{topic}"}} 3.0' in prometheus


def test_a_message_whose_ttl_ends_becomes_a_dead_letter(hermes: InProcessHermes, client: HermesClient) -> None:
    failing = SubscriberServer(always(503)).start()
    try:
        topic = client.create_topic()
        policy = {"messageTtl": 1, "messageBackoff": 200}
        name = client.create_subscription(topic, failing.url, subscriptionPolicy=policy, **ON)
        message_id = published(client, topic, '{"late": true}')
        wait_until(lambda: len(dead_letters(client, topic, name)) == 1, timeout=20)
        [letter] = dead_letters(client, topic, name)
        assert letter["messageId"] == message_id and letter["lastStatus"] == 503
        assert letter["attempts"] >= 2 and "503" in letter["reason"]
    finally:
        failing.stop()


def test_from_and_to_select_by_time_and_purge_deletes_them(
    client: HermesClient, rejecting: SubscriberServer, admin: BrokerAdmin
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, rejecting.url, **ON)
    for i in range(2):
        published(client, topic, f'{{"n": {i}}}')
    wait_until(lambda: len(dead_letters(client, topic, name)) == 2, timeout=20)
    first, second = letters = dead_letters(client, topic, name)
    # given up in parallel, the two may be written in the other order than their discard times
    earliest, latest = min(d["timestamp"] for d in letters), max(d["timestamp"] for d in letters)
    assert dead_letters(client, topic, name, **{"from": latest}) == [d for d in letters if d["timestamp"] == latest]
    assert dead_letters(client, topic, name, to=earliest) == [d for d in letters if d["timestamp"] == earliest]
    assert dead_letters(client, topic, name, to=earliest - 1) == []
    assert dead_letters(client, topic, name, **{"from": "2000-01-01T00:00:00Z"}) == [first, second]
    for bad in ({"limit": "0"}, {"limit": "1001"}, {"from": "yesterday"}, {"to": "12:00"}):
        response = client.management.get(f"/topics/{topic}/subscriptions/{name}/dead-letters", params=bad)
        assert response.status_code == 400 and response.json()["message"].startswith(f"{next(iter(bad))}:"), bad
    purge = client.management.delete(f"/topics/{topic}/subscriptions/{name}/dead-letters")
    assert purge.status_code == 200 and purge.json() == {"purged": 2}
    assert dead_letters(client, topic, name) == []
    kafka_topic = dead_letter_topic(SubscriptionName(TopicName.parse(topic), name))
    started = time.monotonic()  # a redrive under way reads from where it was: the purged records are skipped
    assert read_records(admin.connection, kafka_topic, 0, 0, 2, 10, timeout=5) == []
    assert time.monotonic() - started < 5
    published(client, topic, '{"after": "purge"}')
    wait_until(lambda: len(dead_letters(client, topic, name)) == 1, timeout=20)
    assert dead_letters(client, topic, name)[0]["id"] == "2"


def test_the_policy_is_off_by_default_and_checked(client: HermesClient, admin: BrokerAdmin) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://127.0.0.1:9/")
    assert "deadLetters" not in client.management.get(f"/topics/{topic}/subscriptions/{name}").json()
    path = f"/topics/{topic}/subscriptions/{name}"
    invalid = (({"deadLetters": True}, "deadLetters"), ({"deadLetters": {"enabled": 1}}, "deadLetters.enabled"))
    for body, field in invalid:
        response = client.management.put(path, json=body)
        assert response.status_code == 400 and response.json()["message"].startswith(f"{field}:"), response.text
    assert client.management.put(path, json=ON).json()["deadLetters"] == {"enabled": True}
    assert client.management.put(path, json={"description": "kept"}).json()["deadLetters"] == {"enabled": True}
    assert "deadLetters" not in client.management.put(path, json={"deadLetters": {"enabled": False}}).json()
    assert dead_letters(client, topic, name) == []  # no topic yet: none


def test_the_dead_letter_topic_is_no_user_topic_and_goes_with_its_subscription(
    client: HermesClient, rejecting: SubscriberServer, admin: BrokerAdmin
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, rejecting.url, **ON)
    published(client, topic, "{}")
    wait_until(lambda: len(dead_letters(client, topic, name)) == 1, timeout=20)
    kafka_topic = dead_letter_topic(SubscriptionName(TopicName.parse(topic), name))
    assert admin.topic_exists(kafka_topic)
    assert kafka_topic not in client.management.get("/consistency/inconsistencies/topics").json()
    refused = client.management.delete("/consistency/inconsistencies/topics", params={"topicName": kafka_topic})
    assert refused.status_code == 403 and admin.topic_exists(kafka_topic)
    assert client.publish(kafka_topic, "{}").status_code in (400, 404)
    assert client.management.delete(f"/topics/{topic}/subscriptions/{name}").status_code == 200
    wait_until(lambda: not admin.topic_exists(kafka_topic), timeout=10)


def test_a_refused_dead_letter_holds_the_offset_back_until_it_is_written(
    hermes: InProcessHermes,
    client: HermesClient,
    rejecting: SubscriberServer,
    admin: BrokerAdmin,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, rejecting.url, **ON)
    kafka_topic = dead_letter_topic(SubscriptionName(TopicName.parse(topic), name))
    admin.create_topic(kafka_topic, 1, max_message_bytes=100)  # smaller than any dead letter: the broker refuses it
    group = f"hermes_{topic}_{name}"
    before = sum(admin.committed_offsets(group, topic).values())
    caplog.set_level(logging.WARNING, logger="hermes.consumers.dead_letters")
    published(client, topic, '{"refused": "at first"}')
    rejecting.wait_for(1, timeout=20)
    wait_until(lambda: caplog.text.count(f"dead letter(s) of {topic}${name}") >= 2, timeout=20)
    assert sum(admin.committed_offsets(group, topic).values()) == before, "committed before its dead letter was written"
    assert dead_letters(client, topic, name) == []
    admin.alter_topic(kafka_topic, max_message_bytes=1024 * 1024)
    wait_until(lambda: len(dead_letters(client, topic, name)) == 1, timeout=20)
    wait_until(lambda: sum(admin.committed_offsets(group, topic).values()) == before + 1, timeout=10)


class Fixable:
    """A subscriber that refuses everything (400) until fixed."""

    def __init__(self) -> None:
        self.fixed = False
        self.server = SubscriberServer(lambda _n, _r: Reply(200 if self.fixed else 400)).start()

    def delivered(self) -> list[str]:
        return [r.message_id or "" for r in self.server.received if r.at >= self.fixed_at]

    def fix(self) -> None:
        self.fixed_at = time.monotonic()
        self.fixed = True


@pytest.fixture
def fixable() -> Iterator[Fixable]:
    subscriber = Fixable()
    yield subscriber
    subscriber.server.stop()


def redrive(client: HermesClient, topic: str, name: str, body: Any) -> httpx.Response:
    return client.management.post(f"/topics/{topic}/subscriptions/{name}/dead-letters/redrive", json=body)


def redrives(client: HermesClient, topic: str, name: str) -> list[dict[str, Any]]:
    response = client.management.get(f"/topics/{topic}/subscriptions/{name}/dead-letters/redrives")
    assert response.status_code == 200, response.text
    jobs: list[dict[str, Any]] = response.json()
    return jobs


def test_a_redrive_after_the_fix_delivers_the_dead_letters_to_their_subscription_only(
    client: HermesClient, fixable: Fixable, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, fixable.server.url, **ON)
    other = client.create_subscription(topic, subscriber.url)
    ids = [published(client, topic, f'{{"n": {i}}}') for i in range(3)]
    wait_until(lambda: len(dead_letters(client, topic, name)) == 3, timeout=20)
    subscriber.wait_for(3, timeout=20)
    fixable.fix()
    started = redrive(client, topic, name, {})
    assert started.status_code == 202, started.text
    job = started.json()
    conforms(job, "Redrive")
    assert (job["status"], job["start"], job["end"], job["position"]) == ("PENDING", 0, 3, 0)
    wait_until(lambda: sorted(fixable.delivered()) == sorted(ids), timeout=20)
    wait_until(lambda: redrives(client, topic, name)[0]["status"] == "DONE", timeout=10)
    [done] = redrives(client, topic, name)
    conforms([done], "[Redrive]")
    assert (done["id"], done["position"], done["redriven"]) == (job["id"], 3, 3)
    assert len(subscriber.received) == 3, "the redrive went to another subscription of the topic"
    assert len(dead_letters(client, topic, name)) == 3  # a redrive keeps them: purge deletes them

    def counted() -> bool:
        totals = client.management.get(f"/topics/{topic}/subscriptions/{name}/metrics").json()["totals"]
        return bool(totals["redriven"] == 3)

    wait_until(counted, timeout=10)
    assert client.management.get(f"/topics/{topic}/subscriptions/{other}/dead-letters").json() == []


def test_a_redrive_by_ids_takes_those_only_and_one_failing_again_is_a_new_dead_letter(
    client: HermesClient, fixable: Fixable
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, fixable.server.url, **ON)
    for i in range(3):
        published(client, topic, f'{{"n": {i}}}')
    wait_until(lambda: len(dead_letters(client, topic, name)) == 3, timeout=20)
    first, _, third = dead_letters(client, topic, name)
    assert redrive(client, topic, name, {"ids": [first["id"]]}).status_code == 202  # still refused: again a dead letter
    wait_until(lambda: len(dead_letters(client, topic, name)) == 4, timeout=20)
    again = dead_letters(client, topic, name)[3]
    assert (again["id"], again["messageId"], again["lastStatus"]) == ("3", first["messageId"], 400)
    fixable.fix()
    assert redrive(client, topic, name, {"ids": [third["id"]]}).status_code == 202
    wait_until(lambda: fixable.delivered() == [third["messageId"]], timeout=20)
    wait_until(lambda: [job["status"] for job in redrives(client, topic, name)] == ["DONE", "DONE"], timeout=10)
    assert [job["redriven"] for job in redrives(client, topic, name)] == [1, 1]


def test_a_redrive_request_is_checked(client: HermesClient) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://127.0.0.1:9/", **ON)
    for body, field in (
        ({"ids": "1"}, "ids"),
        ({"ids": []}, "ids"),
        ({"ids": ["x"]}, "ids[0]"),
        ({"ids": ["1"], "from": 0}, "ids"),
        ({"from": "yesterday"}, "from"),
        ({"to": True}, "to"),
        ([], "redrive"),
    ):
        response = redrive(client, topic, name, body)
        assert response.status_code == 400 and response.json()["message"].startswith(f"{field}:"), (body, response.text)
    off = client.create_subscription(topic, "http://127.0.0.1:9/")
    refused = redrive(client, topic, off, {})
    assert refused.status_code == 400 and refused.json()["message"].startswith("deadLetters.enabled:")
    assert redrives(client, topic, off) == []


def test_a_key_ordered_redrive_sends_a_keys_messages_one_after_another(client: HermesClient) -> None:
    fixed = threading.Event()
    slow = 0.4  # the fixed subscriber's first answer: the key's next message waits for it

    def script(n: int, received: Received) -> Reply:
        if not fixed.is_set():
            return Reply(400)
        return Reply(200, delay=slow if b'"n": 0' in received.body else 0.0)

    server = SubscriberServer(script).start()
    try:
        topic = client.create_topic()
        policy = {"ordering": "KEY"}
        name = client.create_subscription(topic, server.url, subscriptionPolicy=policy, **ON)
        for i in range(3):
            assert client.publish(topic, f'{{"n": {i}}}', {"Partition-Key": "order-1"}).status_code in (201, 202)
        wait_until(lambda: len(dead_letters(client, topic, name)) == 3, timeout=20)
        refused = len(server.received)
        fixed.set()
        assert redrive(client, topic, name, {}).status_code == 202
        redriven = server.wait_for(refused + 3, timeout=20)[refused:]
        assert [r.body for r in redriven] == [f'{{"n": {i}}}'.encode() for i in range(3)]
        assert redriven[1].at - redriven[0].at >= slow * 0.9, "the key's next message went before the first was done"
    finally:
        server.stop()


def test_a_batch_subscription_redrives_its_dead_letters_in_a_batch(client: HermesClient, fixable: Fixable) -> None:
    topic = client.create_topic()
    policy = {"batchSize": 10, "batchTime": 100, "messageTtl": 0}
    name = client.create_subscription(topic, fixable.server.url, deliveryType="BATCH", subscriptionPolicy=policy, **ON)
    ids = [published(client, topic, f'{{"n": {i}}}') for i in range(3)]
    wait_until(lambda: len(dead_letters(client, topic, name)) == 3, timeout=20)
    fixable.fix()
    assert redrive(client, topic, name, {}).status_code == 202
    wait_until(lambda: len(fixable.delivered()) >= 1, timeout=20)
    batches = [r for r in fixable.server.received if r.at >= fixable.fixed_at]
    assert sorted(m for r in batches for m in r.headers["Hermes-Message-Ids"].split(",")) == sorted(ids)
    assert sorted(n for r in batches for n in (item["n"] for item in json.loads(r.body))) == [0, 1, 2]
    wait_until(lambda: redrives(client, topic, name)[0]["status"] == "DONE", timeout=10)


def test_an_offloaded_message_stays_offloaded_in_its_dead_letter_and_is_redriven_whole(
    client: HermesClient, fixable: Fixable
) -> None:
    topic = client.create_topic(maxMessageSize=1024)  # larger bodies are offloaded beside Kafka
    name = client.create_subscription(topic, fixable.server.url, **ON)
    body = '{"data": "' + "x" * 5000 + '"}'
    message_id = published(client, topic, body)
    wait_until(lambda: len(dead_letters(client, topic, name)) == 1, timeout=20)
    [letter] = dead_letters(client, topic, name)
    assert letter["messageId"] == message_id and letter["offloaded"] and letter["headers"]["_format"] == "external"
    assert "url" in json.loads(letter["body"]) and len(letter["body"]) < 1024  # the placeholder, not the body
    fixable.fix()
    assert redrive(client, topic, name, {}).status_code == 202
    wait_until(lambda: fixable.delivered() == [message_id], timeout=20)
    assert [r.body for r in fixable.server.received if r.at >= fixable.fixed_at] == [body.encode()]

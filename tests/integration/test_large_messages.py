"""Transparent offload for HTTP publishers and subscribers: a body over the topic's maxMessageSize is stored beside
Kafka and a placeholder produced in its place; consumers fetch it back before delivery, SERIAL and BATCH."""

from __future__ import annotations

import os
from typing import Any

import bson
import httpx
import orjson
import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.topics import KAFKA_MAX_BODY, RECORD_HEADROOM
from hermes.errors import BrokerError
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

LIMIT = 52 * 1024 * 1024
BUDGET = 1024 * 1024  # bodies held at once: less than one 50 MB message (it goes alone), two of 700 KB


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"offload_max_message_size": LIMIT, "consumer_offloaded_bytes": BUDGET}


def _json_body(size: int) -> bytes:
    filler = os.urandom(size // 2).hex()[: size - 12]
    return b'{"data": "' + filler.encode() + b'"}'


def test_a_50_mb_message_arrives_byte_identical_serial_and_batch(
    client: HermesClient, hermes: InProcessHermes, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()  # maxMessageSize 50 KB
    client.create_subscription(topic, subscriber.url + "serial")
    client.create_subscription(topic, subscriber.url + "batch", deliveryType="BATCH")
    body = _json_body(50 * 1024 * 1024)
    response = client.frontend.post(
        f"/topics/{topic}", content=body, headers={"Content-Type": "application/json"}, timeout=120
    )
    assert response.status_code == 201, response.text
    message_id = response.headers["Hermes-Message-Id"]
    spool = hermes.hermes.settings.data_dir / "offload" / ".partial"  # the body went through a file, now gone
    assert not list(spool.glob("*.body"))

    received = {r.path: r for r in subscriber.wait_for(2, timeout=120)}
    serial, batch = received["/serial"], received["/batch"]
    assert serial.message_id == message_id
    assert serial.body == body
    assert batch.body == b"[" + body + b"]"
    assert batch.headers["Hermes-Message-Ids"] == message_id

    stored = httpx.get(f"{hermes.frontend_url}/offload/msg/{message_id}", timeout=60)  # as a spec client sees it
    document = bson.decode(stored.content)
    assert document["message"] == body
    assert dict(map(tuple, document["headers"]))["hermes-message-id"] == message_id.encode()


def test_the_body_budget_sends_a_batch_before_a_body_it_has_no_room_for_and_filters_read_stored_bodies(
    client: HermesClient, hermes: InProcessHermes, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic(maxMessageSize=1024)
    policy = {"batchSize": 10, "batchTime": 500, "batchVolume": 10 * 1024 * 1024}
    client.create_subscription(topic, subscriber.url + "batch", deliveryType="BATCH", subscriptionPolicy=policy)
    filters = [{"type": "jsonpath", "path": "$.n", "matcher": "2"}]
    client.create_subscription(topic, subscriber.url + "filtered", filters=filters)
    bodies = [b'{"n": "%d", "data": "%s"}' % (n, b"x" * 700_000) for n in range(3)]
    for body in bodies:
        assert client.publish(topic, body).status_code == 201

    received = subscriber.wait_for(4, timeout=60)
    batches = sorted(r.body for r in received if r.path == "/batch")
    assert batches == [b"[" + body + b"]" for body in bodies]  # two never fit the budget together
    assert [r.body for r in received if r.path == "/filtered"] == [bodies[2]]
    supervisor = hermes.hermes.supervisor
    assert supervisor is not None and supervisor._context is not None
    budget = supervisor._context.offloaded.budget
    wait_until(lambda: budget.held == 0, timeout=10)  # every stored body was let go


def test_a_large_chunked_body_is_offloaded_through_a_file(client: HermesClient, hermes: InProcessHermes) -> None:
    topic = client.create_topic(maxMessageSize=1024)
    body = _json_body(3 * 1024 * 1024)
    parts = (body[i : i + 256 * 1024] for i in range(0, len(body), 256 * 1024))  # no Content-Length: chunked
    response = client.frontend.post(f"/topics/{topic}", content=parts, headers={"Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    spool = hermes.hermes.settings.data_dir / "offload" / ".partial"
    assert not list(spool.glob("*.body"))
    stored = httpx.get(f"{hermes.frontend_url}/offload/msg/{response.headers['Hermes-Message-Id']}", timeout=60)
    assert bson.decode(stored.content)["message"] == body


def test_a_large_avro_message_is_validated_encoded_and_offloaded(
    client: HermesClient, hermes: InProcessHermes, subscriber: SubscriberServer
) -> None:
    schema = {
        "type": "record",
        "name": "Big",
        "fields": [{"name": "n", "type": "int"}, {"name": "text", "type": "string"}],
    }
    topic = client.create_topic(contentType="AVRO", schema=schema, maxMessageSize=1024)
    client.create_subscription(topic, subscriber.url + "avro", contentType="AVRO")
    client.create_subscription(topic, subscriber.url + "json")
    record = {"n": 7, "text": "t" * 5000}
    refused = client.publish(topic, orjson.dumps({"n": "seven", "text": "t" * 5000}))
    assert refused.status_code == 400 and "field `n`" in refused.json()["message"]  # checked first
    published = client.publish(topic, orjson.dumps(record))
    assert published.status_code == 201, published.text
    message_id = published.headers["Hermes-Message-Id"]

    received = {r.path: r for r in subscriber.wait_for(2, timeout=60)}
    assert orjson.loads(received["/json"].body) == record
    avro = received["/avro"]
    assert avro.headers["Content-Type"] == "avro/binary" and avro.headers["Schema-Version"] == "1"
    assert avro.body == b"\x0e" + b"\x90\x4e" + b"t" * 5000  # zigzag varints: 7, then the string's length 5000
    stored = bson.decode(httpx.get(f"{hermes.frontend_url}/offload/msg/{message_id}", timeout=60).content)
    assert stored["message"] == avro.body  # Kafka clients find the Avro binary, with its schema version header
    assert dict(map(tuple, stored["headers"]))["hermes-schema-version"] == b"1"


def _offloaded(hermes: InProcessHermes, message_id: str) -> bool:
    return httpx.get(f"{hermes.frontend_url}/offload/msg/{message_id}", timeout=30).status_code == 200


def test_a_body_within_a_large_maxmessagesize_goes_to_kafka_or_beside_it(
    client: HermesClient, hermes: InProcessHermes, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic(maxMessageSize=64 * 1024 * 1024)
    client.create_subscription(topic, subscriber.url + "within")
    direct, beside = _json_body(3 * 1024 * 1024), _json_body(KAFKA_MAX_BODY + 1024)
    published = [client.publish(topic, body) for body in (direct, beside)]
    assert [r.status_code for r in published] == [201, 201], [r.text for r in published]
    ids = [r.headers["Hermes-Message-Id"] for r in published]
    assert [_offloaded(hermes, i) for i in ids] == [False, True]  # over Kafka's record limit: beside it
    received = {r.message_id: r.body for r in subscriber.wait_for(2, timeout=60)}
    assert received == dict(zip(ids, (direct, beside), strict=True))


def test_raising_maxmessagesize_raises_the_kafka_topics_limit(
    client: HermesClient, hermes: InProcessHermes, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()  # maxMessageSize 50 KB
    admin = BrokerAdmin(hermes.hermes.connection)
    updated = client.management.put(f"/topics/{topic}", json={"maxMessageSize": 4 * 1024 * 1024})
    assert updated.status_code == 200, updated.text

    def raised() -> bool:  # the broker learns of the topic and its altered config shortly after
        try:
            return admin.topic_config(topic)["max.message.bytes"] == str(4 * 1024 * 1024 + RECORD_HEADROOM)
        except BrokerError:
            return False

    wait_until(raised)
    client.create_subscription(topic, subscriber.url + "raised")
    body = _json_body(2 * 1024 * 1024)
    direct: list[str] = []

    def goes_to_kafka() -> bool:  # once the frontend knows the new size (until then, the body is offloaded)
        published = client.publish(topic, body)
        assert published.status_code == 201, published.text
        if _offloaded(hermes, published.headers["Hermes-Message-Id"]):
            return False
        direct.append(published.headers["Hermes-Message-Id"])
        return True

    wait_until(goes_to_kafka)
    wait_until(lambda: any(r.message_id == direct[0] and r.body == body for r in subscriber.received), timeout=60)


def test_a_body_over_the_offload_limit_is_413(client: HermesClient) -> None:
    topic = client.create_topic()
    response = client.publish(topic, b"x" * (LIMIT + 1))
    assert response.status_code == 413
    assert f"the offload limit {LIMIT}" in response.json()["message"]


def test_a_topics_own_offload_limit_is_kept_within_the_frontends(client: HermesClient) -> None:
    topic = client.create_topic(maxMessageSize=1024, offloadMaxMessageSize=4096)
    shown = client.management.get(f"/topics/{topic}").json()
    assert shown["offloadMaxMessageSize"] == 4096
    assert client.publish(topic, _json_body(4000)).status_code == 201
    refused = client.publish(topic, _json_body(5000))
    assert refused.status_code == 413
    assert "the offload limit 4096" in refused.json()["message"]
    upload = bson.encode({"message": b"x" * 5000})
    assert client.frontend.post(f"/offload/topic/{topic}+oversized", content=upload).status_code == 413

    cleared = client.management.put(f"/topics/{topic}", json={"offloadMaxMessageSize": None})
    assert cleared.status_code == 200, cleared.text
    assert "offloadMaxMessageSize" not in client.management.get(f"/topics/{topic}").json()
    bad = client.management.put(f"/topics/{topic}", json={"offloadMaxMessageSize": 0})
    assert bad.status_code == 400
    assert bad.json()["message"].startswith("offloadMaxMessageSize")


def test_a_message_whose_body_is_gone_is_undelivered_with_the_reason(
    client: HermesClient, hermes: InProcessHermes, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic(maxMessageSize=1024)
    name = client.create_subscription(topic, subscriber.url)
    hermes.consumer(topic, name)
    hermes.suspend(client, topic, name)
    gone = client.publish(topic, _json_body(4096))
    assert gone.status_code == 201, gone.text
    blob = hermes.hermes.settings.data_dir / "offload" / topic / gone.headers["Hermes-Message-Id"]
    blob.unlink()
    after = client.publish(topic, '{"small": true}')
    client.set_state(topic, name, "ACTIVE")

    [delivered] = subscriber.wait_for(1, timeout=60)  # the partition moves on
    assert delivered.message_id == after.headers["Hermes-Message-Id"]
    last = f"/topics/{topic}/subscriptions/{name}/undelivered/last"
    wait_until(lambda: client.management.get(last).status_code == 200, timeout=30)
    record = client.management.get(last).json()
    assert "is gone" in record["reason"]
    assert orjson.loads(record["message"])["url"].endswith(gone.headers["Hermes-Message-Id"])

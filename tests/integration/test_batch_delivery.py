"""BATCH delivery against the real broker and real subscribers."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from hermes.domain.message import KAFKA_MESSAGE_ID, KAFKA_PUBLISH_TIMESTAMP, KAFKA_SCHEMA_VERSION
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Reply, SubscriberServer, always

pytestmark = pytest.mark.integration

READ_AHEAD_BYTES = 64 * 1024  # the smallest allowed: the SERIAL read-ahead's byte bound must not apply to BATCH
CITY_SCHEMA = {
    "type": "record",
    "name": "Visit",
    "fields": [{"name": "n", "type": "int"}, {"name": "city", "type": "string"}],
}


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"consumer_read_ahead_bytes": READ_AHEAD_BYTES}


def batch_subscription(client: HermesClient, topic: str, url: str, **policy: int | bool) -> str:
    return client.create_subscription(topic, url, deliveryType="BATCH", subscriptionPolicy=policy)


def test_a_batch_is_sent_when_batch_size_is_reached(client: HermesClient, subscriber: SubscriberServer) -> None:
    topic = client.create_topic()
    batch_subscription(client, topic, subscriber.url, batchSize=5, batchTime=60_000)
    ids = [
        client.publish(topic, f'{{"n": {i}}}', headers={"Partition-Key": "one"}).headers["Hermes-Message-Id"]
        for i in range(10)
    ]
    first, second = subscriber.wait_for(2, timeout=20)
    assert orjson.loads(first.body) == [{"n": i} for i in range(5)], "a JSON array, in partition order"
    assert orjson.loads(second.body) == [{"n": i} for i in range(5, 10)]
    assert first.headers["Hermes-Message-Ids"].split(",") == ids[:5]
    assert first.headers["Hermes-Batch-Id"] != second.headers["Hermes-Batch-Id"]


def test_batches_carry_more_than_the_serial_read_ahead_bytes(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    batch_subscription(client, topic, subscriber.url, batchSize=20, batchTime=100)
    body = '{"pad": "' + "x" * 1000 + '"}'
    count = 3 * READ_AHEAD_BYTES // len(body)
    for _ in range(count):
        client.publish(topic, body)
    deadline = time.monotonic() + 30
    while sum(len(orjson.loads(r.body)) for r in subscriber.received) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sum(len(orjson.loads(r.body)) for r in subscriber.received) == count


def test_a_batch_is_sent_when_batch_time_passes(client: HermesClient, subscriber: SubscriberServer) -> None:
    topic = client.create_topic()
    batch_subscription(client, topic, subscriber.url, batchSize=100, batchTime=300)
    client.publish(topic, '{"n": 1}')
    client.publish(topic, '{"n": 2}')
    [received] = subscriber.wait_for(1, timeout=20)
    assert sorted(m["n"] for m in orjson.loads(received.body)) == [1, 2]


def test_a_batch_is_sent_when_batch_volume_is_reached(client: HermesClient, subscriber: SubscriberServer) -> None:
    topic = client.create_topic()
    batch_subscription(client, topic, subscriber.url, batchSize=100, batchTime=60_000, batchVolume=45)
    for i in range(5):  # 21 bytes each: the fifth overflows the second batch
        client.publish(topic, f'{{"n": {i}, "pad": "xx"}}', headers={"Partition-Key": "one"})
    first, second = subscriber.wait_for(2, timeout=20)
    assert [m["n"] for m in orjson.loads(first.body)] == [0, 1]
    assert [m["n"] for m in orjson.loads(second.body)] == [2, 3]


def test_a_filtered_batch_of_an_avro_topic_holds_its_matching_messages_as_json(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    """Filters read Avro messages as records, as for SERIAL (they were read as JSON, so nothing matched), and the
    batch is a JSON array of the messages converted to JSON (they were joined as Avro binary)."""
    topic = client.create_topic(contentType="AVRO", schema=CITY_SCHEMA)
    client.create_subscription(
        topic,
        subscriber.url,
        deliveryType="BATCH",
        subscriptionPolicy={"batchSize": 2, "batchTime": 60_000},
        filters=[{"type": "avropath", "path": ".city", "matcher": "W.*"}],
    )
    for n, city in enumerate(("Warsaw", "Berlin", "Wroclaw")):
        assert client.publish(topic, orjson.dumps({"n": n, "city": city}), headers={"Partition-Key": "one"}).is_success
    [received] = subscriber.wait_for(1, timeout=20)
    assert orjson.loads(received.body) == [{"n": 0, "city": "Warsaw"}, {"n": 2, "city": "Wroclaw"}]
    assert received.headers["Content-Type"] == "application/json"


def test_a_failed_batch_is_retried_as_a_whole(client: HermesClient) -> None:
    subscriber = SubscriberServer(lambda n, _r: Reply(500) if n < 2 else Reply(200)).start()
    try:
        topic = client.create_topic()
        batch_subscription(client, topic, subscriber.url, batchSize=3, batchTime=60_000, messageBackoff=100)
        for i in range(3):
            client.publish(topic, f'{{"n": {i}}}', headers={"Partition-Key": "one"})
        attempts = subscriber.wait_for(3, timeout=20)
        assert len({a.body for a in attempts}) == 1 and len({a.headers["Hermes-Batch-Id"] for a in attempts}) == 1
        assert [a.headers["Hermes-Retry-Count"] for a in attempts] == ["0", "1", "2"]
        time.sleep(0.5)
        assert len(subscriber.received) == 3
    finally:
        subscriber.stop()


def test_an_endpoint_change_wakes_a_batch_waiting_for_its_retry(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    old = SubscriberServer(always(503, **{"Retry-After": "30"})).start()
    try:
        topic = client.create_topic()
        name = batch_subscription(client, topic, old.url, batchSize=2, batchTime=60_000, messageTtl=120)
        for i in range(2):
            client.publish(topic, f'{{"n": {i}}}', headers={"Partition-Key": "one"})
        old.wait_for(1, timeout=20)  # the batch now waits 30 s for its retry
        change = {"endpoint": subscriber.url}
        assert client.management.put(f"/topics/{topic}/subscriptions/{name}", json=change).status_code == 200
        updated = time.monotonic()
        [received] = subscriber.wait_for(1, timeout=40)
        assert received.at - updated < 3.0, "the retry waited out the old endpoint's Retry-After"
        assert [m["n"] for m in orjson.loads(received.body)] == [0, 1]
    finally:
        old.stop()


def test_batch_limits_are_enforced_by_the_api(client: HermesClient) -> None:
    topic = client.create_topic()
    for field, value in (("mode", "BROADCAST"), ("contentType", "AVRO")):
        response = client.management.post(
            f"/topics/{topic}/subscriptions",
            json={"name": "b", "endpoint": "http://service", "deliveryType": "BATCH", field: value},
        )
        assert response.status_code == 400 and field in response.json()["message"]


def test_a_batch_of_non_json_bodies_is_a_json_array_of_their_texts(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()  # a JSON topic takes any body
    batch_subscription(client, topic, subscriber.url, batchSize=4, batchTime=60_000)
    bodies = ["orderId=42&x=1", '<order id="1"/>', '{"n": 1}', ""]
    for body in bodies:
        assert client.publish(topic, body, headers={"Partition-Key": "one"}).status_code in (201, 202)
    (batch,) = subscriber.wait_for(1, timeout=20)
    assert orjson.loads(batch.body) == ["orderId=42&x=1", '<order id="1"/>', {"n": 1}, ""]
    assert batch.headers["Content-Type"] == "application/json"


def test_an_avro_record_that_is_no_record_of_its_schema_is_discarded_and_the_batch_goes_on(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic(contentType="AVRO", schema=CITY_SCHEMA)
    name = batch_subscription(client, topic, subscriber.url, batchSize=2, batchTime=60_000)
    producer = hermes.hermes.producer
    assert producer is not None
    headers = [(KAFKA_MESSAGE_ID, b"cut-short"), (KAFKA_PUBLISH_TIMESTAMP, b"1"), (KAFKA_SCHEMA_VERSION, b"1")]

    async def produce() -> None:
        await producer.send(topic, b"\x02\x14abc", headers=headers, key=b"one")  # n=1, a 10-byte city of 3

    hermes.call(produce())
    for n in (2, 3):
        client.publish(topic, orjson.dumps({"n": n, "city": "Warsaw"}), headers={"Partition-Key": "one"})
    [received] = subscriber.wait_for(1, timeout=20)
    assert orjson.loads(received.body) == [{"n": 2, "city": "Warsaw"}, {"n": 3, "city": "Warsaw"}]
    path = f"/topics/{topic}/subscriptions/{name}/undelivered/last"
    wait_until(lambda: client.management.get(path).status_code == 200, timeout=15)
    assert "the body ends before its record does" in client.management.get(path).json()["reason"]

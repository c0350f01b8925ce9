"""The publishing API against the real broker: statuses, metadata in Kafka, Avro, tracking, metrics."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.broker.producer import BrokerProducer
from hermes.domain.avro import json_to_avro
from hermes.domain.message import Message
from hermes.domain.trace import TRACKING_TOPIC
from hermes.frontend.readiness import Readiness
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes, unique
from tests.support.subscriber import SubscriberServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    """Every body over its topic's maxMessageSize is refused here, as in Hermes: these tests check that 413
    (large messages, offloaded up to a limit, are test_large_messages.py's)."""
    return {"offload_max_message_size": 1}


AVRO_SCHEMA = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {
            "name": "addresses",
            "type": {
                "type": "array",
                "items": {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]},
            },
        },
    ],
}


def read_topic(
    hermes: InProcessHermes, topic: str, count: int, timeout: float = 20, start: dict[int, int] | None = None
) -> list[Message]:
    """The first ``count`` messages of the topic, or of each partition from its ``start`` offset."""
    assert hermes.hermes.connection is not None
    partitions = BrokerAdmin(hermes.hermes.connection).partitions(topic)
    consumer = BrokerConsumer(hermes.hermes.connection, unique("reader"), auto_offset_reset="earliest")
    consumer.assign({(topic, p): (start or {}).get(p, 0) for p in partitions})
    messages: list[Message] = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < count and time.monotonic() < deadline:
            messages.extend(consumer.poll(100, 0.2))
    finally:
        consumer.close()
    return messages


def test_statuses(client: HermesClient) -> None:
    topic = client.create_topic(maxMessageSize=1024)
    assert client.publish(topic, '{"ok": true}').status_code == 201
    group = topic.rpartition(".")[0]
    missing = client.publish(f"{group}.missing", "{}")
    assert missing.status_code == 404 and missing.json()["code"] == "TOPIC_NOT_EXISTS"
    too_big = client.publish(topic, '{"x": "' + "a" * 1100 + '"}')
    assert too_big.status_code == 413 and "maxMessageSize" in too_big.json()["message"]


def test_json_topics_take_any_body_of_any_content_type(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic()
    xml = client.frontend.post(f"/topics/{topic}", content=b"<a/>", headers={"Content-Type": "application/xml"})
    assert xml.status_code in (201, 202)  # 202: an ack slower than the timeout (a loaded machine), journaled
    assert client.publish(topic, '{"broken": ').status_code in (201, 202)
    bodies = {m.body for m in read_topic(hermes, topic, 2)}
    assert bodies == {b"<a/>", b'{"broken": '}


def test_json_validation_is_a_topic_opt_in(client: HermesClient) -> None:
    topic = client.create_topic(jsonValidationEnabled=True)
    assert client.management.get(f"/topics/{topic}").json()["jsonValidationEnabled"] is True
    assert client.publish(topic, '{"ok": true}').status_code in (201, 202)
    malformed = client.publish(topic, '{"broken": ')
    assert malformed.status_code == 400 and malformed.json()["code"] == "VALIDATION_ERROR"
    xml = client.frontend.post(f"/topics/{topic}", content=b"<a/>", headers={"Content-Type": "application/xml"})
    assert xml.status_code == 415 and "jsonValidationEnabled" in xml.json()["message"]


def test_errors_carry_the_message_id(client: HermesClient) -> None:
    topic = client.create_topic(maxMessageSize=1024)
    too_big = client.publish(topic, "a" * 1100)
    missing = client.publish(topic + "-missing", "{}")
    for response in (too_big, missing):
        assert response.status_code in (404, 413) and len(response.headers["Hermes-Message-Id"]) == 36


def test_ack_none_answers_once_the_producer_has_the_message(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic(ack="NONE")
    assert client.management.get(f"/topics/{topic}").json()["ack"] == "NONE"
    # acks=0 has no retry and no error: a record the broker cannot take yet (a new partition still being set up,
    # even once metadata names its leader) may be dropped, as Kafka documents. So every partition first takes an
    # acknowledged record, and the published message is read after them.
    connection = hermes.hermes.connection
    assert connection is not None
    warm_up = Producer({"bootstrap.servers": connection.bootstrap_servers, "acks": "all"})
    partitions = BrokerAdmin(connection).partitions(topic)
    for partition in partitions:
        warm_up.produce(topic, b"warm-up", partition=partition)
    assert warm_up.flush(20) == 0
    start = BrokerAdmin(connection).end_offsets(topic)
    response = client.publish(topic, '{"n": 1}')
    assert response.status_code == 201
    [message] = read_topic(hermes, topic, 1, start=start)
    assert message.message_id == response.headers["Hermes-Message-Id"]


def test_routing_errors_keep_the_error_shape(client: HermesClient) -> None:
    topic = client.create_topic()
    wrong_method = client.frontend.get(f"/topics/{topic}")
    assert wrong_method.status_code == 405 and wrong_method.headers["Allow"] == "POST"
    assert wrong_method.json()["code"] == "METHOD_NOT_ALLOWED"
    status_by_post = client.frontend.post("/status/health")
    assert status_by_post.status_code == 405 and status_by_post.headers["Allow"] == "GET,HEAD"
    unknown = client.frontend.get("/no/such/path")
    assert unknown.status_code == 404 and unknown.json() == {"message": "Not Found", "code": "NOT_FOUND"}


def test_status_routes_answer_as_hermes(client: HermesClient) -> None:
    for path in ("/", "/status/ping", "/status/health"):
        response = client.frontend.get(path)
        assert (response.status_code, response.text) == (200, "UP"), path
    ready = client.frontend.get("/status/ready")
    assert (ready.status_code, ready.text) == (200, "READY")


def test_not_ready_while_the_broker_is_unreachable() -> None:
    producer = BrokerProducer(KafkaConnection("127.0.0.1:1"))  # nothing listens on port 1
    readiness = Readiness(producer)

    async def check() -> bool:
        await readiness.start()
        ready = readiness.ready
        await readiness.stop()
        return ready

    try:
        assert not asyncio.run(check())
    finally:
        producer.close(0)


def test_a_backlog_of_small_messages_is_not_refused_as_too_large(hermes: InProcessHermes, client: HermesClient) -> None:
    """Messages queued together (a burst, a broker pause, a journal's replay) go out in record batches that must
    fit the topic's max.message.bytes (here maxMessageSize 50 KiB plus headroom): librdkafka's default batch of
    up to 1 MB was refused whole, and every message in it answered 413."""
    topic = client.create_topic()
    assert hermes.hermes.connection is not None
    producer = BrokerProducer(hermes.hermes.connection)

    async def burst() -> list[Any]:
        sends = [producer.send(topic, b'{"pad": "' + b"x" * 1000 + b'"}') for _ in range(400)]
        return await asyncio.gather(*sends, return_exceptions=True)

    try:
        outcomes = asyncio.run(burst())
    finally:
        producer.close(5)
    assert [o for o in outcomes if isinstance(o, Exception)] == []
    assert len(read_topic(hermes, topic, 400)) == 400


def test_metadata_travels_in_kafka(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic()
    response = client.publish(
        topic, '{"n": 1}', headers={"Partition-Key": "customer-7", "Trace-Id": "abc", "X-Private": "not propagated"}
    )
    [message] = read_topic(hermes, topic, 1)
    assert message.message_id == response.headers["Hermes-Message-Id"]
    assert message.key == b"customer-7" and message.body == b'{"n": 1}'
    assert message.propagated_headers == {"Trace-Id": "abc"}
    assert abs(message.publish_timestamp - time.time() * 1000) < 60_000


def test_the_cache_follows_topic_changes(client: HermesClient) -> None:
    topic = client.create_topic(maxMessageSize=2048)
    body = '{"x": "' + "a" * 1500 + '"}'
    assert client.publish(topic, body).status_code == 201
    client.management.put(f"/topics/{topic}", json={"maxMessageSize": 1024})
    wait_until(lambda: client.publish(topic, body).status_code == 413, 2)
    client.management.delete(f"/topics/{topic}")
    wait_until(lambda: client.publish(topic, "{}").status_code == 404, 2)


def test_avro_topics_validate_and_convert_json(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic(contentType="AVRO", schema=orjson.dumps(AVRO_SCHEMA).decode())
    good = '{"name": "abc", "age": 7, "addresses": [{"city": "Warsaw"}]}'
    assert client.publish(topic, good).status_code == 201
    wrong = client.publish(topic, '{"name": "abc", "age": "seven", "addresses": []}')
    assert wrong.status_code == 400
    assert wrong.json()["message"].endswith("schema: field `age` must be int, not a string"), wrong.text
    missing = client.publish(topic, '{"age": 7, "addresses": [{}]}')
    assert missing.status_code == 400
    assert missing.json()["message"].endswith("schema: missing required field `name`"), missing.text
    unknown_version = client.publish(topic, good, headers={"Schema-Version": "9"})
    assert unknown_version.status_code == 400
    [message] = read_topic(hermes, topic, 1)
    assert message.schema_version == 1 and message.body != good.encode()  # Avro binary, not the JSON


def test_avro_topics_take_avro_json_and_avro_binary(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic(contentType="AVRO", schema=orjson.dumps(AVRO_SCHEMA).decode())
    record = {"name": "abc", "age": 7, "addresses": [{"city": "Warsaw"}]}
    binary = json_to_avro(orjson.dumps(AVRO_SCHEMA).decode(), orjson.dumps(record))

    def post(body: bytes, content_type: str, **headers: str) -> Any:
        return client.frontend.post(f"/topics/{topic}", content=body, headers={"Content-Type": content_type, **headers})

    assert post(orjson.dumps(record), "avro/json").status_code in (201, 202)  # 202: a slow ack, journaled
    assert post(binary, "avro/binary", **{"Schema-Id": "1"}).status_code in (201, 202)
    assert post(binary[:-1], "avro/binary").status_code == 400
    assert post(b"<a/>", "application/xml").status_code == 415
    unknown_id = post(binary, "avro/binary", **{"Schema-Id": "9", "Schema-Version": "1"})  # the id comes first
    assert unknown_id.status_code == 400 and "Schema-Id" in unknown_id.text
    assert {m.body for m in read_topic(hermes, topic, 2)} == {binary}


def test_avro_delivery_as_json_and_as_avro_with_avropath_filters(client: HermesClient) -> None:
    as_json, as_avro = SubscriberServer().start(), SubscriberServer().start()
    try:
        topic = client.create_topic(contentType="AVRO", schema=AVRO_SCHEMA)
        client.create_subscription(
            topic,
            as_json.url,
            filters=[{"type": "avropath", "path": ".addresses[*].city", "matcher": "W.*", "matchingStrategy": "any"}],
        )
        client.create_subscription(topic, as_avro.url, contentType="AVRO")
        client.publish(topic, '{"name": "a", "age": 1, "addresses": [{"city": "Berlin"}]}')
        client.publish(topic, '{"name": "b", "age": 2, "addresses": [{"city": "Berlin"}, {"city": "Warsaw"}]}')
        [received] = as_json.wait_for(1, timeout=20)
        assert orjson.loads(received.body) == {
            "name": "b",
            "age": 2,
            "addresses": [{"city": "Berlin"}, {"city": "Warsaw"}],
        }
        assert received.headers["Content-Type"] == "application/json"
        avro = as_avro.wait_for(2, timeout=20)
        assert all(r.headers["Content-Type"] == "avro/binary" and r.headers["Schema-Version"] == "1" for r in avro)
        time.sleep(0.3)
        assert len(as_json.received) == 1
    finally:
        as_json.stop()
        as_avro.stop()


def test_tracking_events_and_prometheus(hermes: InProcessHermes, client: HermesClient) -> None:
    topic = client.create_topic(trackingEnabled=True)
    message_id = client.publish(topic, '{"tracked": 1}').headers["Hermes-Message-Id"]

    def events() -> list[dict[str, Any]]:
        found = [orjson.loads(m.body) for m in read_topic(hermes, TRACKING_TOPIC, 10_000, timeout=2)]
        return [e for e in found if e["messageId"] == message_id]

    wait_until(lambda: [e["status"] for e in events()] == ["INFLIGHT", "SUCCESS"], 15, 0.5)
    assert all(e["topicName"] == topic and e["cluster"] == "primary" for e in events())
    metrics = client.frontend.get("/status/prometheus")
    assert metrics.status_code == 200
    assert f'hermes_frontend_requests_total{{status="201",topic="{topic}"}} 1.0' in metrics.text

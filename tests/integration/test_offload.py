"""The offload service of large messages, driven by a Kafka client that follows the protocol of the spec (written
here with confluent-kafka and pymongo's ``bson``): discovery through ``sys.metadata``, a BSON upload, a placeholder
record with the ``_format: external`` header, and a second client that reads the placeholder and fetches the
message. Then what the service refuses, expiry with the topic's retention and deletion with the topic."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bson
import httpx
import orjson
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from hermes.broker.embedded import EmbeddedBroker
from tests.support.hermes import HermesClient, InProcessHermes, unique
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

OFFLOAD_LIMIT = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"offload_max_message_size": OFFLOAD_LIMIT, "offload_expiry_interval": 0.2}


class SpecClient:
    """A Kafka client speaking the large-message protocol as the spec describes it, nothing of Hermes."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        endpoint = discover(bootstrap)
        assert endpoint is not None
        self.endpoint = endpoint
        self.http = httpx.Client(timeout=30)

    def _consumer(self) -> Consumer:
        return _consumer(self._bootstrap)

    def publish(self, topic: str, message: bytes, key: bytes, headers: list[tuple[str, bytes]]) -> str:
        message_id = uuid.uuid4()
        document = {"message": message, "key": key, "headers": [["_id", message_id.bytes], *map(list, headers)]}
        response = self.http.post(f"{self.endpoint}/topic/{topic}+oversized", content=bson.encode(document))
        assert response.status_code == 201, response.text
        url = f"{self.endpoint}/msg/{message_id}"
        producer = Producer({"bootstrap.servers": self._bootstrap})
        producer.produce(
            topic, orjson.dumps({"url": url}), key=key, headers=[("_id", message_id.bytes), ("_format", b"external")]
        )
        assert producer.flush(10) == 0
        return url

    def read(self, topic: str) -> dict[str, Any]:
        """The first record of the topic, with the offloaded message in place of a placeholder."""
        consumer = self._consumer()
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            record = _poll(consumer)
        finally:
            consumer.close()
        if dict(record.headers() or []).get("_format") != b"external":
            return {"message": record.value(), "key": record.key(), "headers": record.headers()}
        url = orjson.loads(record.value())["url"]
        assert url.startswith(self.endpoint)  # credentials go only to the broker's own offload service
        response = self.http.get(url)
        assert response.status_code == 200, response.text
        return bson.decode(response.content)


def _poll(consumer: Consumer, timeout: float = 30) -> Any:
    def received() -> Any:
        nonlocal record
        record = consumer.poll(0.2)
        return record is not None and record.error() is None

    record: Any = None
    wait_until(received, timeout=timeout, interval=0)
    return record


@pytest.fixture
def spec_client(hermes: InProcessHermes, kafka: EmbeddedBroker) -> Iterator[SpecClient]:
    client = SpecClient(kafka.bootstrap_servers)
    yield client
    client.http.close()


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": unique("spec"), "enable.auto.commit": False})


def discover(bootstrap: str) -> str | None:
    """The endpoint that the latest record of sys.metadata advertises (None while there is none)."""
    consumer = _consumer(bootstrap)
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition("sys.metadata", 0), timeout=10)
        if not high:
            return None
        consumer.assign([TopicPartition("sys.metadata", 0, high - 1)])
        endpoint: str = orjson.loads(_poll(consumer).value())["LargeMessageUploadEndpoint"]
        return endpoint
    except KafkaException:
        return None  # no such topic yet
    finally:
        consumer.close()


def test_discovery_advertises_the_frontends_offload_service(hermes: InProcessHermes, spec_client: SpecClient) -> None:
    assert spec_client.endpoint == f"{hermes.frontend_url}/offload"


def test_a_spec_client_offloads_a_message_that_another_reads_back(
    client: HermesClient, spec_client: SpecClient, kafka: EmbeddedBroker
) -> None:
    topic = client.create_topic()  # maxMessageSize 50 KB
    message = uuid.uuid4().bytes * (3 * 1024 * 1024 // 16)
    url = spec_client.publish(topic, message, b"the key", [("origin", b"test")])

    reader = SpecClient(kafka.bootstrap_servers)
    try:
        received = reader.read(topic)
    finally:
        reader.http.close()

    assert received["message"] == message
    assert received["key"] == b"the key"
    assert ["origin", b"test"] in received["headers"]
    assert url.rsplit("/", 1)[1] == str(uuid.UUID(bytes=dict(map(tuple, received["headers"]))["_id"]))


def test_headers_may_be_a_document_and_the_id_its_text_form(client: HermesClient, hermes: InProcessHermes) -> None:
    topic = client.create_topic()
    message_id = str(uuid.uuid4())
    document = bson.encode({"message": b"m", "headers": {"_id": message_id.encode(), "a": b"b"}})
    response = httpx.post(f"{hermes.frontend_url}/offload/topic/{topic}+oversized", content=document)
    assert response.status_code == 201, response.text
    assert response.headers["Location"] == f"/offload/msg/{message_id}"
    stored = bson.decode(httpx.get(f"{hermes.frontend_url}/offload/msg/{message_id}").content)
    assert stored["headers"] == {"_id": message_id.encode(), "a": b"b"}


@pytest.mark.parametrize(
    ("document", "status", "says"),
    [
        (b"not bson at all", 400, "not a BSON document"),
        (bson.encode({"headers": []}), 400, "message: is required"),
        (bson.encode({"message": "text"}), 400, "message: must be a BSON binary, not a string"),
        (bson.encode({"message": b"m", "key": 7}), 400, "key: must be a BSON binary, not an integer"),
        (bson.encode({"message": b"m", "headers": "h"}), 400, "headers: must be an array"),
        (bson.encode({"message": b"m", "headers": [["_id"]]}), 400, "headers[0]: must be an array of two"),
        (bson.encode({"message": b"m", "headers": [["a", "text"]]}), 400, "headers[0]: the value must be a BSON"),
        (bson.encode({"message": b"m", "headers": {"_id": b"nope"}}), 400, "headers._id: must be a UUID"),
        (bson.encode({"message": b"m" * (OFFLOAD_LIMIT + 1)}), 413, "exceeds the offload limit"),
    ],
    ids=["not-bson", "no-message", "text-message", "int-key", "text-headers", "pair", "text-value", "bad-id", "413"],
)
@pytest.mark.parametrize("padding", [0, 1536 * 1024], ids=["small", "spooled"])  # a spooled one is checked in its file
def test_a_bad_upload_is_refused_naming_what_is_wrong(
    client: HermesClient, hermes: InProcessHermes, document: bytes, status: int, says: str, padding: int
) -> None:
    topic = _module_topic(client)
    if padding and document.startswith(b"not"):
        document += b" " * padding
    elif padding:  # a field before the others, pushing the body over the spooling threshold
        fields = bson.encode({"pad": b"p" * padding})
        inner = fields[4:-1] + document[4:]
        document = struct.pack("<i", 4 + len(inner)) + inner
    response = httpx.post(f"{hermes.frontend_url}/offload/topic/{topic}+oversized", content=document)
    assert response.status_code == status, response.text
    assert says in response.json()["message"]


def test_unknown_topics_and_messages_are_404(hermes: InProcessHermes) -> None:
    upload = bson.encode({"message": b"m"})
    response = httpx.post(f"{hermes.frontend_url}/offload/topic/no.such+oversized", content=upload)
    assert (response.status_code, response.json()["code"]) == (404, "TOPIC_NOT_EXISTS")
    for message_id in (str(uuid.uuid4()), "not-a-uuid"):
        response = httpx.get(f"{hermes.frontend_url}/offload/msg/{message_id}")
        assert (response.status_code, response.json()["code"]) == (404, "OFFLOADED_MESSAGE_NOT_FOUND")


def test_offloaded_messages_expire_with_the_topics_retention(client: HermesClient, hermes: InProcessHermes) -> None:
    topic = client.create_topic(retentionTime={"duration": 1, "retentionUnit": "SECONDS"})
    url = _upload(hermes, topic)
    assert httpx.get(url).status_code == 200
    blobs = _blobs(hermes, topic)
    wait_until(lambda: not any(blobs.iterdir()), timeout=30)  # the sweep deleted it
    assert httpx.get(url).status_code == 404


def test_offloaded_messages_are_deleted_with_their_topic(client: HermesClient, hermes: InProcessHermes) -> None:
    topic = client.create_topic()
    url = _upload(hermes, topic)
    blobs = _blobs(hermes, topic)
    assert any(blobs.iterdir())
    assert client.management.delete(f"/topics/{topic}").status_code == 200
    wait_until(lambda: not blobs.exists(), timeout=30)
    assert httpx.get(url).status_code == 404


_topics: dict[str, str] = {}


def _module_topic(client: HermesClient) -> str:
    if "topic" not in _topics:
        _topics["topic"] = client.create_topic()
    return _topics["topic"]


def _upload(hermes: InProcessHermes, topic: str) -> str:
    message_id = uuid.uuid4()
    upload = bson.encode({"message": b"m" * 1000, "headers": [["_id", message_id.bytes]]})
    response = httpx.post(f"{hermes.frontend_url}/offload/topic/{topic}+oversized", content=upload)
    assert response.status_code == 201, response.text
    return f"{hermes.frontend_url}/offload/msg/{message_id}"


def _blobs(hermes: InProcessHermes, topic: str) -> Path:
    return hermes.hermes.settings.data_dir / "offload" / topic

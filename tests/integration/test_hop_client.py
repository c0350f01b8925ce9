"""hop-client 0.13 (the spec's client of the large-message protocol, 003) against Hermes, unchanged: it discovers the
offload service through ``sys.metadata``, signs in to it by HTTP SCRAM, uploads a message too large for its topic and
reads it back; a message an HTTP publisher posted, which the frontend offloaded itself, reads back the same way.

hop-client offloads only with credentials, so this module has a broker of its own that signs clients in by SCRAM
(without TLS, which these tests do not need)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hop import Stream
from hop.auth import Auth
from hop.io import StartPosition
from hop.models import Blob
from scramp import ScramException

from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.embedded_security import BrokerSecurity
from tests.support.hermes import HermesClient

pytestmark = [
    pytest.mark.integration,
    # hop-client warns that plain HTTP could expose credentials: here it is the loopback interface
    pytest.mark.filterwarnings("ignore:Large message offload service is bare HTTP:UserWarning"),
]

USER, PASSWORD = "alice", "alice-secret"
# bob's password differs between Kafka and the offload service: he reaches the broker and fails the service's proof
MISMATCHED, KAFKA_PASSWORD, OFFLOAD_PASSWORD = "bob", "bob-kafka-secret", "bob-offload-secret"
MB = 1024 * 1024


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """This module's broker, in place of the session's: it signs Kafka clients in by SCRAM-SHA-512."""
    security = BrokerSecurity({USER: PASSWORD, MISMATCHED: KAFKA_PASSWORD}, tls=False)
    broker = EmbeddedBroker(tmp_path_factory.mktemp("kafka-scram"), security=security)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {
        "kafka_security_protocol": "SASL_PLAINTEXT",
        "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_username": USER,
        "kafka_sasl_password": PASSWORD,
        "kafka_scram_users": f"{USER}:{PASSWORD},{MISMATCHED}:{OFFLOAD_PASSWORD}",
    }


def stream_url(kafka: EmbeddedBroker, topic: str) -> str:
    return f"kafka://{kafka.bootstrap_servers}/{topic}"


def read_all(kafka: EmbeddedBroker, topic: str) -> list[tuple[Any, Any]]:
    """Every message of the topic with its metadata, as hop-client's consumer returns them (offloaded ones fetched)."""
    stream = Stream(auth=Auth(USER, PASSWORD, ssl=False), start_at=StartPosition.EARLIEST, until_eos=True)
    with stream.open(stream_url(kafka, topic), "r") as consumer:
        received = list(consumer.read(metadata=True))
    failed = [item.error() for item in received if not isinstance(item, tuple)]  # hop's error in a fetch's place
    assert not failed, failed
    return received


def test_hop_client_reads_back_what_it_uploaded_and_what_http_publishers_posted(
    client: HermesClient, kafka: EmbeddedBroker
) -> None:
    """5 MB and 50 MB each way, in one topic read by one consumer (a hop-client consumer's start takes seconds)."""
    topic = client.create_topic()  # maxMessageSize 50 KB: hop-client offloads what its Kafka topic would refuse
    started = int(time.time() * 1000)
    uploaded = {os.urandom(size): f"hop {size}".encode() for size in (5 * MB, 50 * MB)}
    with Stream(auth=Auth(USER, PASSWORD, ssl=False)).open(stream_url(kafka, topic), "w") as producer:
        for body, key in uploaded.items():
            producer.write(Blob(content=body), headers=[("origin", b"hop")], key=key)
    posted = {}  # not UTF-8: hop-client hands over a body without a _format header as it is
    for body in (b"\xff" + os.urandom(size - 1) for size in (5 * MB, 50 * MB)):
        key = f"http {len(body)}"
        headers = {"Content-Type": "application/json", "Partition-Key": key}
        response = client.frontend.post(f"/topics/{topic}", content=body, headers=headers, timeout=120)
        assert response.status_code == 201, response.text
        posted[body] = (key.encode(), response.headers["Hermes-Message-Id"].encode())

    received = read_all(kafka, topic)
    finished = int(time.time() * 1000)

    assert len(received) == 4
    for payload, metadata in received:
        assert isinstance(payload, Blob), payload
        assert started <= metadata.timestamp <= finished
        if payload.content in uploaded:
            assert metadata.key == uploaded.pop(payload.content)
            assert ("origin", b"hop") in metadata.headers and ("_format", b"blob") in metadata.headers
        else:
            key, message_id = posted.pop(payload.content)
            assert metadata.key == key
            assert ("hermes-message-id", message_id) in metadata.headers
    assert not uploaded and not posted


def test_a_wrong_password_is_reported_as_scrams_invalid_proof(client: HermesClient, kafka: EmbeddedBroker) -> None:
    topic = client.create_topic()
    stream = Stream(auth=Auth(MISMATCHED, KAFKA_PASSWORD, ssl=False))
    with stream.open(stream_url(kafka, topic), "w") as producer, pytest.raises(ScramException, match="invalid-proof"):
        producer.write(Blob(content=b"x" * 200_000))  # over the topic's limit: offloaded

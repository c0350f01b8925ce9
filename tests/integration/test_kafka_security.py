"""Hermes' Kafka settings (SASL/SCRAM over TLS) against the embedded broker started with SCRAM users and a
generated CA: Hermes' connection creates a topic, writes and reads it; a wrong password or no TLS is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.embedded_security import BrokerSecurity
from hermes.config import load_settings
from hermes.errors import HermesError
from tests.support.hermes import unique

pytestmark = pytest.mark.integration

PASSWORD = "scram-password-of-hermes"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    secured = EmbeddedBroker(tmp_path_factory.mktemp("kafka-scram"), security=BrokerSecurity({"hermes": PASSWORD}))
    secured.start()
    yield secured
    secured.stop()


def connection(broker: EmbeddedBroker, **overrides: Any) -> KafkaConnection:
    values = {
        "data_dir": broker.directory.parent,
        "kafka_bootstrap_servers": broker.bootstrap_servers,
        "kafka_security_protocol": "SASL_SSL",
        "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_username": "hermes",
        "kafka_sasl_password": PASSWORD,
        "kafka_ssl_ca_location": str(broker.directory / "tls" / "ca.pem"),
        **overrides,
    }
    return KafkaConnection.from_settings(load_settings(values), broker.bootstrap_servers)


def test_hermes_reaches_a_scram_and_tls_broker_and_writes_and_reads(broker: EmbeddedBroker) -> None:
    kafka = connection(broker)
    admin = BrokerAdmin(kafka)
    admin.wait_until_reachable(15)
    topic = unique("secure")
    admin.create_topic(topic, 1)
    producer = Producer(kafka.config())
    producer.produce(topic, b"over SCRAM and TLS")
    assert producer.flush(15) == 0
    consumer = Consumer(kafka.config(**{"group.id": unique("g"), "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    try:
        message = None
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.value() == b"over SCRAM and TLS"
    finally:
        consumer.close()
    assert "PASSWORD" not in repr(kafka) and PASSWORD not in repr(kafka)


@pytest.mark.parametrize(
    "overrides",
    [{"kafka_sasl_password": "not-the-password"}, {"kafka_security_protocol": "SASL_PLAINTEXT"}],
    ids=["wrong password", "no TLS"],
)
def test_the_broker_refuses_wrong_credentials_and_plaintext(broker: EmbeddedBroker, overrides: Any) -> None:
    with pytest.raises(HermesError):
        BrokerAdmin(connection(broker, **overrides)).wait_until_reachable(3)


def test_the_generated_keys_are_private(broker: EmbeddedBroker) -> None:
    for path in (broker.directory / "tls" / "server.pem", broker.directory / "broker.secret"):
        assert Path(path).stat().st_mode & 0o777 == 0o600

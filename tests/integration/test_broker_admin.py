"""Offset look-ups against the real broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from tests.support.hermes import unique

pytestmark = pytest.mark.integration


def test_end_offsets_count_every_message_of_a_multi_record_batch(kafka: EmbeddedBroker) -> None:
    """The end counts every record of a batch, and a time look-up finds the first record at or after it."""
    admin = BrokerAdmin(KafkaConnection(kafka.bootstrap_servers))
    topic = unique("admin")
    admin.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 200})
    before = time.time() * 1000
    for i in range(25):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(10) == 0
    assert admin.end_offsets(topic) == {0: 25}
    assert admin.beginning_offsets(topic) == {0: 0}
    assert admin.offsets_for_time(topic, int(before) - 60_000) == {0: 0}
    assert admin.offsets_for_time(topic, int(time.time() * 1000) + 60_000) == {0: 25}


def test_delete_records_moves_the_beginning(kafka: EmbeddedBroker) -> None:
    admin = BrokerAdmin(KafkaConnection(kafka.bootstrap_servers))
    topic = unique("admin")
    admin.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for i in range(10):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(10) == 0
    admin.delete_records(topic, {0: 6})
    assert admin.beginning_offsets(topic) == {0: 6}
    assert admin.end_offsets(topic) == {0: 10}

"""Offset look-ups against the real broker."""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker, free_port
from hermes.errors import BrokerUnavailable
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


def _threads_and_descriptors() -> tuple[int, int]:
    """This process's threads (librdkafka's too, which Python does not list) and open descriptors."""
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def test_a_closed_admin_frees_its_threads_and_descriptors_at_once(kafka: EmbeddedBroker) -> None:
    gc.collect()  # no earlier test's client left for the collector to free while this one counts
    before = _threads_and_descriptors()
    admin = BrokerAdmin(KafkaConnection(kafka.bootstrap_servers))
    admin.create_topic(topic := unique("admin"), 1)
    assert admin.committed_offsets(unique("group"), topic) == {}  # its group requests' client connected too
    threads, descriptors = _threads_and_descriptors()
    assert threads > before[0] and descriptors > before[1]
    admin.close()
    after = _threads_and_descriptors()  # not when the collector gets to it: this test still holds admin
    assert after[0] <= before[0] and after[1] <= before[1], f"{after} after, {before} before"
    with pytest.raises(RuntimeError, match="closed"):
        admin.partitions(topic)
    admin.close()  # again: nothing


def _clients() -> int:
    """librdkafka clients of this process (one main thread each)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/comm") as comm:
            names.append(comm.read().strip())
    return names.count("rdk:main")


def test_an_admin_makes_its_group_requests_client_with_its_first_group_request(kafka: EmbeddedBroker) -> None:
    gc.collect()
    before = _clients()
    with BrokerAdmin(KafkaConnection(kafka.bootstrap_servers)) as admin:
        admin.create_topic(topic := unique("admin"), 1)
        assert _clients() == before + 1, "an admin making no group request holds one client"
        assert admin.committed_offsets(unique("group"), topic) == {}
        assert _clients() == before + 2
    assert _clients() == before


class _Started:
    """An admin client noting when its metadata request started and returned."""

    def __init__(self, client: Any) -> None:
        self.client, self.started, self.returned = client, threading.Event(), 0.0

    def list_topics(self, *args: Any, **kwargs: Any) -> Any:
        self.started.set()
        try:
            return self.client.list_topics(*args, **kwargs)
        finally:
            self.returned = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.client.__exit__(*exc)


def test_a_close_waits_for_a_call_under_way() -> None:
    """What a stopping Hermes relies on when it closes its admin after a stopped role's call left running in a
    thread: librdkafka's destroy waits for the call (a handle freed under it would crash the process)."""
    admin = BrokerAdmin(KafkaConnection(f"127.0.0.1:{free_port()}"))  # nothing listens: a metadata request waits
    client = admin._admin = _Started(admin._admin)
    calling = threading.Thread(target=_reach, args=(admin,))
    calling.start()
    assert client.started.wait(10)
    admin.close()
    closed = time.monotonic()
    calling.join(10)
    assert 0 < client.returned <= closed, "the handle was destroyed under the call"


def _reach(admin: BrokerAdmin) -> None:
    with contextlib.suppress(BrokerUnavailable, RuntimeError):  # unreachable, then closed
        admin.wait_until_reachable(1.5)

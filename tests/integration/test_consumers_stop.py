"""A stopped consumers role is freed with its Kafka clients, in a process that goes on running."""

from __future__ import annotations

import gc
import os
import weakref
from pathlib import Path

import pytest

from hermes.broker.embedded import EmbeddedBroker
from hermes.consumers.supervisor import _freeze
from hermes.runtime import Role
from tests.support.hermes import HermesClient, InProcessHermes, hermes_settings
from tests.support.subscriber import SubscriberServer

pytestmark = pytest.mark.integration


def kafka_clients() -> int:
    """This process's librdkafka clients: each has one thread named rdk:main (and pipes of its own)."""
    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                count += comm.read().strip() == "rdk:main"
        except OSError:  # the thread ended meanwhile
            pass
    return count


def test_a_stopped_consumers_role_is_freed_with_its_kafka_clients_after_its_objects_were_frozen(
    kafka: EmbeddedBroker, tmp_path: Path, subscriber: SubscriberServer
) -> None:
    before = kafka_clients()
    running = InProcessHermes(
        hermes_settings(tmp_path, kafka.bootstrap_servers), frozenset({Role.MANAGEMENT, Role.CONSUMERS})
    ).start()
    client = HermesClient(running.management_url, running.management_url)
    try:
        topic = client.create_topic()
        running.consumer(topic, client.create_subscription(topic, subscriber.url))
        _freeze(thaw=False)  # as the supervisor does once consumers stopped coming for a while
        supervisor = weakref.ref(running.hermes.supervisor)
    finally:
        client.close()
        running.stop()
    del running
    try:
        gc.collect()
        assert supervisor() is None
        assert kafka_clients() <= before
    finally:
        gc.unfreeze()  # what a failure left frozen

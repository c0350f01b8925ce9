"""A crash inside one consumer restarts that consumer only, with a growing backoff, and loses nothing.

The faults are real: the consumers load a resolver plug-in (``tests.support.resolvers:FaultyResolver``) that
raises an unexpected error for some subscription metadata, exactly as a buggy third-party plug-in would; and a
Kafka client that cannot start (a missing TLS authority file) fails the consumer's Kafka thread.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes.broker.connection import KafkaConnection
from hermes.consumers.content import ContentConverter
from hermes.consumers.context import ConsumerContext
from hermes.consumers.process import ConsumerProcess
from hermes.consumers.sender.http import HttpSender
from hermes.consumers.sender.senders import MessageSenders
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription
from hermes.metadata.sqlite import SqliteMetadataRepository
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import SubscriberServer

pytestmark = pytest.mark.integration

POLICY = {"messageBackoff": 100, "messageTtl": 120, "requestTimeout": 10_000}


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {
        "endpoint_address_resolver": "tests.support.resolvers:FaultyResolver",
        "consumer_restart_backoff": 0.3,
        "consumer_restart_backoff_max": 1.2,
    }


@pytest.fixture
def subscribers() -> Iterator[tuple[SubscriberServer, SubscriberServer]]:
    servers = SubscriberServer().start(), SubscriberServer().start()
    yield servers
    for server in servers:
        server.stop()


def test_a_crashing_consumer_is_restarted_alone_and_delivers_everything(
    hermes: InProcessHermes,
    client: HermesClient,
    subscribers: tuple[SubscriberServer, SubscriberServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="hermes.consumers.supervisor")
    steady, crashing = subscribers
    topic = client.create_topic()
    client.create_subscription(topic, steady.url, "steady", subscriptionPolicy=POLICY)
    client.create_subscription(topic, crashing.url, "crashing", subscriptionPolicy=POLICY)
    supervisor = hermes.hermes.supervisor
    assert supervisor is not None
    published: list[str] = []
    stop_publishing = threading.Event()

    def publish() -> None:  # a steady stream until told to stop
        for i in range(3000):
            if stop_publishing.is_set():
                return
            response = client.publish(topic, f'{{"n": {i}}}')
            assert response.status_code in (201, 202), response.text
            published.append(response.headers["Hermes-Message-Id"])
            time.sleep(0.02)

    publisher = threading.Thread(target=publish)
    publisher.start()
    crashing.wait_for(20, timeout=30)
    path = f"/topics/{topic}/subscriptions/crashing"
    assert client.management.put(path, json={"endpointAddressResolverMetadata": {"region": "eu"}}).status_code == 200

    wait_until(lambda: supervisor.crashes(topic, "crashing") >= 3, timeout=40, interval=0.1)
    steady_before = len(steady.received)
    crashing_before = len(crashing.received)
    published_before_recovery = len(published)
    wait_until(lambda: len(steady.received) >= steady_before + 20, timeout=10)  # the other one keeps going
    assert len(crashing.received) == crashing_before, "the crashing subscription delivered while crashing"
    assert supervisor.crashes(topic, "steady") == 0

    assert client.management.put(path, json={"endpointAddressResolverMetadata": {}}).status_code == 200
    crashing.wait_for(len(crashing.received) + 20, timeout=30)  # delivering again while messages keep coming
    stop_publishing.set()
    publisher.join(30)
    assert len(published) > published_before_recovery + 20, "messages kept coming across the crashes"
    wait_until(lambda: set(published) <= {r.message_id for r in crashing.received}, timeout=40, interval=0.2)
    wait_until(lambda: set(published) <= {r.message_id for r in steady.received}, timeout=20, interval=0.2)
    assert max(Counter(r.message_id for r in steady.received).values()) == 1, "the steady one was disturbed"

    delays = [float(d) for d in re.findall(r"restarting it in ([\d.]+) s", caplog.text)]
    assert delays[:3] == [0.3, 0.6, 1.2] and max(delays) == 1.2, delays
    assert "KeyError" in caplog.text and f"{topic}$crashing" in caplog.text


def test_a_kafka_client_that_cannot_start_is_reported_as_a_crash(
    sqlite_repository: SqliteMetadataRepository, tmp_path: Path
) -> None:
    """The Kafka thread's own failures are crashes too (here: a TLS authority file that does not exist)."""
    missing = tmp_path / "missing-ca.pem"
    connection = KafkaConnection("127.0.0.1:9", (("security.protocol", "ssl"), ("ssl.ca.location", str(missing))))
    subscription = Subscription(TopicName("g", "t"), "s", EndpointAddress.parse("http://127.0.0.1:9/"))
    crashes: list[BaseException] = []

    async def run() -> ConsumerProcess:
        content = ContentConverter(sqlite_repository)
        sender = MessageSenders(HttpSender())
        context = ConsumerContext(connection, sender, sqlite_repository, content, "node", "primary")
        consumer = ConsumerProcess(subscription, context, crashes.append)
        await consumer.start()
        for _ in range(200):
            if crashes:
                break
            await asyncio.sleep(0.05)
        await consumer.stop()
        return consumer

    consumer = asyncio.run(run())
    assert len(crashes) == 1 and consumer.crash is crashes[0]
    assert "ssl.ca.location" in str(crashes[0])

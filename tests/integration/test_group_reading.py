"""Reading in each subscription's own Kafka consumer group (``--consumer-reading group``, as a cluster's nodes
always read): the group shares the partitions between its members and hands them over on a rebalance."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from hermes.broker.kafka_consumer import BrokerConsumer
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.key_order import assert_one_after_another, keyed_script, publish_keyed, received, requests_by_key
from tests.support.subscriber import Reply, SubscriberServer

pytestmark = pytest.mark.integration

FAST = {"messageBackoff": 100, "messageTtl": 60, "requestTimeout": 10_000}


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"consumer_reading": "group"}


@pytest.fixture
def joined() -> threading.Event:
    return threading.Event()


@pytest.fixture
def subscriber(joined: threading.Event) -> Iterator[SubscriberServer]:
    """100 messages/s at most (5 in flight), 10/s from the 20th until the joiner came: on a loaded machine the
    rebalance took longer than the whole backlog's delivery, and the joiner had nothing left to read."""
    server = SubscriberServer(lambda n, _r: Reply(200, delay=0.05 if n < 20 or joined.is_set() else 0.5)).start()
    yield server
    server.stop()


def test_a_member_joining_the_group_takes_partitions_over_without_repeating_deliveries(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, joined: threading.Event
) -> None:
    """Another consumers node joining a busy subscription's group: only the partitions it takes are revoked, their
    deliveries under way finish before the handover commit, so the joiner reads none of them again; once it
    leaves, the first node takes everything back and delivers the rest."""
    topic = client.create_topic()  # two partitions
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy={**FAST, "inflightSize": 5})
    hermes.consumer(topic, name)
    hermes.suspend(client, topic, name)  # a backlog is published, then delivered
    published = [client.publish(topic, f'{{"n": {i}}}').headers["Hermes-Message-Id"] for i in range(300)]
    client.set_state(topic, name, "ACTIVE")
    subscriber.wait_for(20, timeout=30)
    joiner = BrokerConsumer(hermes.hermes.connection, hermes.consumer(topic, name).subscription.consumer_group_id)
    joiner.subscribe([topic])
    read: list[str] = []
    try:
        wait_until(lambda: bool(read.extend(m.message_id for m in joiner.poll(timeout=0.2))) or bool(read), 30)
        delivered = Counter(r.message_id for r in subscriber.received)
        assert len(delivered) < len(published), "all delivered before the joiner came: nothing was tested"
        assert not set(read) & set(delivered), "the joiner read messages the first node had delivered"
        assert max(delivered.values()) == 1, "the first node delivered a message twice"
    finally:
        joined.set()
        joiner.close()
    wait_until(lambda: set(published) <= {r.message_id for r in subscriber.received}, timeout=30, interval=0.2)
    # taken back from the hand-over's commit, without what its read-ahead held of it before
    assert max(Counter(r.message_id for r in subscriber.received).values()) == 1


def test_ordering_by_key_holds_through_a_rebalance(hermes: InProcessHermes, client: HermesClient) -> None:
    """A member joins and leaves the group of a subscription ordered by key while messages of several keys wait
    behind their keys' deliveries: those of the revoked partition are dropped with it and read again when it comes
    back, each key still delivered one message after another, in order."""
    fast = threading.Event()  # slow answers until the rebalance, so that it comes in the middle
    script, answers = keyed_script(fast=fast)
    subscriber = SubscriberServer(script).start()
    try:
        topic = client.create_topic()  # two partitions
        policy = {**FAST, "inflightSize": 4, "ordering": "KEY"}
        name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy, state="SUSPENDED")
        publish_keyed(client, topic, 15, keys="abcdef")  # a backlog: all of it read at once, most of it held
        client.set_state(topic, name, "ACTIVE")
        subscriber.wait_for(10, timeout=30)
        joiner = BrokerConsumer(hermes.hermes.connection, hermes.consumer(topic, name).subscription.consumer_group_id)
        joiner.subscribe([topic])
        try:
            wait_until(lambda: bool(joiner.poll(timeout=0.2)), timeout=30)  # it has a partition: a rebalance
            assert len(received(subscriber)) < 90, "all delivered before the rebalance: nothing was tested"
        finally:
            fast.set()
            joiner.close()  # another rebalance: the first node takes the partition back
        wait_until(lambda: len(received(subscriber)) == 90, timeout=30, interval=0.2)
        for key, sent in requests_by_key(subscriber, answers).items():
            assert [n for n, _, _ in sent] == list(range(15)), key
            assert_one_after_another(sent)
    finally:
        subscriber.stop()

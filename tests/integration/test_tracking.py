"""Trace events on the tracking topic, as frontends and consumers write them (spec 000, "Message tracking")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.domain.trace import TRACKING_TOPIC
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes, unique
from tests.support.subscriber import Reply, SubscriberServer

pytestmark = pytest.mark.integration

FAST = {"messageBackoff": 100, "messageTtl": 60, "requestTimeout": 10_000}


class TrackingReader:
    """Reads the tracking topic from the start and keeps every event, so tests can look events up by id."""

    def __init__(self, hermes: InProcessHermes) -> None:
        connection = hermes.hermes.connection
        assert connection is not None
        self._consumer = BrokerConsumer(connection, unique("tracking-reader"), auto_offset_reset="earliest")
        self._consumer.assign({(TRACKING_TOPIC, p): 0 for p in BrokerAdmin(connection).partitions(TRACKING_TOPIC)})
        self._events: list[dict[str, Any]] = []

    def events(self, message_id: str, subscription: str | None = None) -> list[dict[str, Any]]:
        while batch := self._consumer.poll(500, 0.2):
            self._events.extend(orjson.loads(m.body) for m in batch)
        return [
            e
            for e in self._events
            if e["messageId"] == message_id and (subscription is None or e.get("subscription") == subscription)
        ]

    def statuses(self, message_id: str, subscription: str) -> list[str]:
        return [e["status"] for e in self.events(message_id, subscription)]

    def close(self) -> None:
        self._consumer.close()


@pytest.fixture
def tracking(hermes: InProcessHermes) -> Iterator[TrackingReader]:
    reader = TrackingReader(hermes)
    yield reader
    reader.close()


@pytest.fixture
def failing_once() -> Iterator[SubscriberServer]:
    server = SubscriberServer(lambda n, _r: Reply(500 if n == 0 else 200)).start()
    yield server
    server.stop()


def test_serial_retry_then_success_is_traced_with_every_field(
    client: HermesClient, tracking: TrackingReader, failing_once: SubscriberServer
) -> None:
    topic = client.create_topic(trackingEnabled=True)
    sub = client.create_subscription(topic, failing_once.url, trackingMode="trackingAll", subscriptionPolicy=FAST)
    message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]
    wait_until(lambda: tracking.statuses(message_id, sub) == ["INFLIGHT", "FAILED", "SUCCESS"], 20, 0.2)
    frontend = [e for e in tracking.events(message_id) if "subscription" not in e]
    assert [e["status"] for e in frontend] == ["INFLIGHT", "SUCCESS"]
    assert all(set(e) == {"messageId", "timestamp", "topicName", "status", "cluster"} for e in frontend)
    inflight, failed, success = tracking.events(message_id, sub)
    for event in (inflight, failed, success):
        assert event["topicName"] == topic and event["cluster"] == "primary"
        assert isinstance(event["partition"], int) and isinstance(event["offset"], int)
        assert event["publishTimestamp"] <= inflight["timestamp"]
    assert "500" in failed["reason"]
    assert inflight["timestamp"] <= failed["timestamp"] <= success["timestamp"]


def test_discarded_only_traces_nothing_but_the_discard(client: HermesClient, tracking: TrackingReader) -> None:
    refusing = SubscriberServer(lambda _n, _r: Reply(500)).start()
    try:
        topic = client.create_topic()
        sub = client.create_subscription(
            topic,
            refusing.url,
            trackingMode="discardedOnly",
            subscriptionPolicy={**FAST, "messageTtl": 1},
        )
        message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]
        wait_until(lambda: tracking.statuses(message_id, sub) == ["DISCARDED"], 20, 0.2)
        assert len(refusing.received) >= 2, "it was retried before the discard, untraced"
        assert tracking.events(message_id) == tracking.events(message_id, sub), "an untracked topic: no frontend events"
    finally:
        refusing.stop()


def test_tracking_off_and_the_older_tracking_enabled(
    client: HermesClient, tracking: TrackingReader, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    silent = client.create_subscription(topic, subscriber.url, trackingMode="trackingOff")
    older = client.create_subscription(topic, subscriber.url, trackingEnabled=True)
    message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]
    subscriber.wait_for(2, timeout=20)
    wait_until(lambda: tracking.statuses(message_id, older) == ["INFLIGHT", "SUCCESS"], 20, 0.2)
    assert tracking.events(message_id, silent) == []


def test_batch_attempts_are_traced_per_message(client: HermesClient, tracking: TrackingReader) -> None:
    server = SubscriberServer(lambda n, _r: Reply(503 if n == 0 else 200)).start()
    try:
        topic = client.create_topic()
        sub = client.create_subscription(
            topic,
            server.url,
            deliveryType="BATCH",
            trackingMode="trackingAll",
            subscriptionPolicy={"batchSize": 2, "batchTime": 60_000, "messageBackoff": 100, "messageTtl": 60},
        )
        ids = [
            client.publish(topic, f'{{"n": {i}}}', headers={"Partition-Key": "one"}).headers["Hermes-Message-Id"]
            for i in range(2)
        ]
        for message_id in ids:
            wait_until(lambda m=message_id: tracking.statuses(m, sub) == ["INFLIGHT", "FAILED", "SUCCESS"], 20, 0.2)
            assert "503" in tracking.events(message_id, sub)[1]["reason"]
    finally:
        server.stop()

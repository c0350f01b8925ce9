"""The SERIAL consumer's read-ahead: messages read beyond the inflightSize window wait in a bounded buffer, start
the moment a delivery ends, and are never committed before they are delivered."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from hermes.broker.embedded import EmbeddedBroker
from hermes.consumers.process import ConsumerProcess
from hermes.consumers.serial import SerialConsumer
from hermes.domain.message import Message
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes, hermes_settings
from tests.support.subscriber import Received, Reply, SubscriberServer

pytestmark = pytest.mark.integration

READ_AHEAD = 20
READ_AHEAD_BYTES = 64 * 1024
FAST = {"messageBackoff": 100, "messageTtl": 60, "requestTimeout": 10_000}


@pytest.fixture(scope="module")
def hermes(kafka: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessHermes]:
    settings = hermes_settings(
        tmp_path_factory.mktemp("hermes"),
        kafka.bootstrap_servers,
        consumer_read_ahead_messages=READ_AHEAD,
        consumer_read_ahead_bytes=READ_AHEAD_BYTES,
    )
    running = InProcessHermes(settings).start()
    yield running
    running.stop()


def serve(servers: list[SubscriberServer], delay: float) -> SubscriberServer:
    server = SubscriberServer(lambda _n, _r: Reply(200, delay=delay)).start()
    servers.append(server)
    return server


def unfinished(consumer: ConsumerProcess) -> int:
    return consumer.receiver.unfinished()


def read_ahead_bytes(consumer: ConsumerProcess) -> int:
    assert isinstance(consumer.consumer, SerialConsumer)
    return READ_AHEAD_BYTES - consumer.consumer.read_ahead.byte_budget()


def numbered(received: list[Received]) -> list[int]:
    return [json.loads(r.body)["n"] for r in received if b'"n"' in r.body]


def most_at_once(received: list[Received], delay: float) -> int:
    """Requests that were open together at most: each stays open ``delay`` after it arrived, and the next one a
    free slot allows can only arrive after that."""
    times = sorted(r.at for r in received)
    return max(sum(1 for s in times if t - delay + 0.005 < s <= t) for t in times)


def backlog(
    hermes: InProcessHermes,
    client: HermesClient,
    subscriber: SubscriberServer,
    count: int,
    size: int = 0,
    **policy: int,
) -> tuple[str, str]:
    """A subscription that joined its group, then ``count`` numbered messages published while it was suspended."""
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy={**FAST, **policy})
    hermes.consumer(topic, name)
    client.publish(topic, '{"warm": 1}')
    subscriber.wait_for(1, timeout=30)
    hermes.suspend(client, topic, name)
    for i in range(count):
        body = json.dumps({"n": i, "pad": "x" * size})
        assert client.publish(topic, body, headers={"Partition-Key": "one"}).status_code in (201, 202)
    return topic, name


def test_reads_ahead_of_the_window_but_sends_at_most_inflight_size(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    delay = 0.5
    subscriber = serve(servers, delay)
    topic, name = backlog(hermes, client, subscriber, 60, inflightSize=4)
    client.set_state(topic, name, "ACTIVE")
    consumer = hermes.consumer(topic, name)
    wait_until(lambda: unfinished(consumer) == 4 + READ_AHEAD, timeout=30)  # the window and a full read-ahead
    samples = []
    for _ in range(20):
        samples.append(unfinished(consumer))
        time.sleep(0.05)
    assert max(samples) <= 4 + READ_AHEAD
    wait_until(lambda: len(numbered(subscriber.received)) >= 60, timeout=60)
    assert sorted(numbered(subscriber.received)) == list(range(60))
    assert most_at_once([r for r in subscriber.received if b'"n"' in r.body], delay) <= 4


def test_a_freed_slot_takes_the_next_buffered_message_at_once(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    """10 in flight and 50 ms per answer: a freed slot takes a buffered message, the Kafka thread reads once per
    half a read-ahead (not once per freed slot), and the window never runs dry while messages are left. Counted,
    not timed: the machine's load stretches every delay."""
    delay = 0.05
    subscriber = serve(servers, delay)
    topic, name = backlog(hermes, client, subscriber, 200, inflightSize=10)
    client.set_state(topic, name, "ACTIVE")
    consumer = hermes.consumer(topic, name)
    assert isinstance(consumer.consumer, SerialConsumer)
    serial = consumer.consumer
    handed_over: list[int] = []  # from here on (its first read may be under way)
    receive = serial.receive

    def counted(messages: list[Message], generation: int) -> None:
        handed_over.append(len(messages))
        receive(messages, generation)

    serial.receive = counted  # type: ignore[method-assign]
    dry = []
    deadline = time.monotonic() + 60
    while (arrived := len(numbered(subscriber.received))) < 200 - 10 - READ_AHEAD and time.monotonic() < deadline:
        if arrived > 0 and unfinished(consumer) == 0 and len(numbered(subscriber.received)) < 200 - 10 - READ_AHEAD:
            dry.append(arrived)  # nothing read nor sending, though more than a window and a read-ahead were left
        time.sleep(0.005)
    wait_until(lambda: len(numbered(subscriber.received)) >= 200, timeout=60)
    assert not dry, f"the sending stalled with {dry[0]} messages delivered"
    received = [r for r in subscriber.received if b'"n"' in r.body]
    assert sorted(numbered(received)) == list(range(200))
    assert most_at_once(received, delay) <= 10
    refill_at = READ_AHEAD // 2
    assert len(handed_over) <= 2 * sum(handed_over) // refill_at + 2, f"{len(handed_over)} reads: {handed_over}"


def test_the_read_ahead_holds_at_most_its_bytes(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    size = 16 * 1024
    subscriber = serve(servers, 2.0)
    topic, name = backlog(hermes, client, subscriber, 30, size=size, inflightSize=1)
    client.set_state(topic, name, "ACTIVE")
    consumer = hermes.consumer(topic, name)
    wait_until(lambda: unfinished(consumer) >= 1 + READ_AHEAD_BYTES // size, timeout=30)
    samples = []
    for _ in range(20):
        samples.append((unfinished(consumer), read_ahead_bytes(consumer)))
        time.sleep(0.05)
    most = max(u for u, _ in samples)
    assert most <= 1 + READ_AHEAD_BYTES // size + 1, f"{most} messages read ahead of 16 KiB each: {samples}"
    assert max(b for _, b in samples) <= READ_AHEAD_BYTES + size + 100


def test_buffered_messages_are_not_committed_before_they_are_delivered(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    """Stopped with a full read-ahead, the consumer commits only below its first unsent message: every buffered
    message comes again after the restart."""
    subscriber = serve(servers, 0.3)
    topic, name = backlog(hermes, client, subscriber, 40, inflightSize=2)
    client.set_state(topic, name, "ACTIVE")
    consumer = hermes.consumer(topic, name)
    wait_until(lambda: unfinished(consumer) == 2 + READ_AHEAD, timeout=30)
    wait_until(lambda: len(numbered(subscriber.received)) >= 4, timeout=30)
    hermes.suspend(client, topic, name)
    before = set(numbered(subscriber.received))
    assert len(before) < 40
    subscriber.script = lambda _n, _r: Reply(200)
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: set(numbered(subscriber.received)) == set(range(40)), timeout=60)

"""One node's subscriptions read through one shared Kafka consumer (the default ``--consumer-reading shared``): a
subscription in step with the others costs no Kafka client of its own, one that falls behind reads on its own
without holding the others back, and comes back once it has caught up."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.consumers.context import ConsumerContext
from hermes.consumers.delivery import Delivery
from hermes.consumers.offsets import Partition
from hermes.consumers.serial import SerialConsumer
from hermes.consumers.shared_reading import (
    Handoff,
    SharedReader,
    SharedReceiver,
    _Run,
    _runs,
    _within,
    commit_in_turn,
)
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.message import Message
from hermes.domain.subscription import DEFAULT_INFLIGHT_SIZE, Subscription
from hermes.domain.topic import TopicName
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes, thread_names
from tests.support.subscriber import Reply, SubscriberServer

pytestmark = pytest.mark.integration

FAST = {"messageBackoff": 100, "messageTtl": 60, "requestTimeout": 10_000}


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"consumer_read_ahead_messages": 5}  # a small window: a slow subscriber falls behind at once


@pytest.fixture
def slow() -> Iterator[SubscriberServer]:
    server = SubscriberServer(lambda _n, _r: Reply(200, delay=0.1)).start()
    yield server
    server.stop()


def _receiver(hermes: InProcessHermes, topic: str, name: str) -> SharedReceiver:
    receiver = hermes.consumer(topic, name).receiver
    assert isinstance(receiver, SharedReceiver)
    return receiver


def _reading_threads(names: list[str]) -> list[str]:
    return [t.name for t in threading.enumerate() if any(t.name.endswith(f"${n}") for n in names)]


def test_subscriptions_in_step_read_through_the_shared_consumer_alone(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    names = [client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST) for _ in range(5)]
    receivers = [_receiver(hermes, topic, name) for name in names]
    wait_until(lambda: all(r.in_lanes for r in receivers), timeout=20)
    wait_until(lambda: not _reading_threads(names), timeout=20)  # no thread nor Kafka consumer of their own
    ids = [client.publish(topic, f'{{"n": {i}}}').headers["Hermes-Message-Id"] for i in range(10)]
    wait_until(lambda: len(subscriber.received) >= 50, timeout=30)
    assert Counter(r.message_id for r in subscriber.received) == Counter({i: 5 for i in ids})
    assert all(r.in_lanes for r in receivers) and not _reading_threads(names)


def test_a_slow_subscription_reads_on_its_own_and_the_fast_one_is_not_held_back(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, slow: SubscriberServer
) -> None:
    topic = client.create_topic()
    fast_name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    slow_name = client.create_subscription(topic, slow.url, subscriptionPolicy={**FAST, "inflightSize": 1})
    fast, behind = _receiver(hermes, topic, fast_name), _receiver(hermes, topic, slow_name)
    wait_until(lambda: fast.in_lanes and behind.in_lanes, timeout=20)
    # more than the slow one's window (1 in flight + 5 read ahead): it cannot take what the lane brings
    ids = [client.publish(topic, f'{{"n": {i}}}').headers["Hermes-Message-Id"] for i in range(40)]
    wait_until(lambda: len(subscriber.received) >= len(ids), timeout=60)
    assert len(slow.received) < len(ids) / 2, "the slow subscriber kept up: nothing was tested"
    assert not behind.in_lanes and fast.in_lanes
    wait_until(lambda: len(slow.received) >= len(ids), timeout=60, interval=0.2)
    wait_until(lambda: behind.in_lanes, timeout=20)  # caught up: back in the lanes, its own consumer closed
    for server in (subscriber, slow):
        assert Counter(r.message_id for r in server.received) == Counter(ids)


def test_each_subscription_gets_its_own_topics_messages_when_one_read_holds_several_topics(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, kafka: EmbeddedBroker
) -> None:
    """The head reads every topic at once: produced together, one poll holds partition 0 of several topics side
    by side (a run of one partition was once taken across them: a message went to another topic's subscribers)."""
    topics = [client.create_topic() for _ in range(3)]
    for topic in topics:
        name = client.create_subscription(topic, f"{subscriber.url}{topic}", subscriptionPolicy=FAST)
        wait_until(lambda topic=topic, name=name: _receiver(hermes, topic, name).in_lanes, timeout=20)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 200})
    for i in range(5):
        for topic in topics:
            producer.produce(topic, f'{{"n": {i}}}'.encode(), partition=0)
    producer.flush(10)
    wait_until(lambda: len(subscriber.received) >= 15, timeout=30)
    for received in subscriber.received:  # records without Hermes' headers have ids made of topic and offset
        assert (received.message_id or "").startswith(received.path.rsplit("/", 1)[-1] + "-0-")
    assert len(subscriber.received) == 15


def test_partitions_added_to_a_topic_are_read_too(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, kafka: EmbeddedBroker
) -> None:
    topic = client.create_topic()  # two partitions
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    receiver = _receiver(hermes, topic, name)
    wait_until(lambda: receiver.in_lanes, timeout=20)
    BrokerAdmin(hermes.hermes.connection).add_partitions(topic, 3)
    wait_until(lambda: receiver.partition_count() == 3, timeout=30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(topic, b'{"n": 3}', partition=2)
    producer.flush(10)
    [received] = subscriber.wait_for(1, timeout=20)
    assert received.body == b'{"n": 3}'
    wait_until(lambda: receiver.in_lanes, timeout=20)


def _quiet_for(calls: list[object], seconds: float) -> bool:
    before = len(calls)
    time.sleep(seconds)
    return len(calls) == before


def test_a_subscription_at_rest_is_passed_by_and_wakes_with_the_next_message(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At rest, the commit rounds (every 0.2 s here) and the metrics reports (as often) leave a subscription alone:
    no lag measured, no gauge computed. The next message is committed, and counted in its metrics, as before."""
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    consumer = hermes.consumer(topic, name)
    receiver = _receiver(hermes, topic, name)
    wait_until(lambda: receiver.in_lanes, timeout=20)
    lags: list[object] = []
    gauges: list[object] = []
    reader_ends, unfinished = receiver._reader.ends, receiver.unfinished

    def ends(partitions: Iterable[Partition]) -> dict[Partition, int]:
        partitions = list(partitions)
        if any(t == topic for t, _ in partitions):
            lags.append(partitions)
        return reader_ends(partitions)

    def counted_unfinished() -> int:
        gauges.append(None)
        return unfinished()

    monkeypatch.setattr(receiver._reader, "ends", ends)
    monkeypatch.setattr(receiver, "unfinished", counted_unfinished)
    metrics = f"/topics/{topic}/subscriptions/{name}/metrics"
    for n in (1, 2):
        client.publish(topic, f'{{"n": {n}}}')
        subscriber.wait_for(n, timeout=20)
        wait_until(lambda: committed(hermes, topic, name) == n, timeout=10, interval=0.2)  # noqa: B023
        wait_until(lambda: client.management.get(metrics).json()["delivered"] == n, timeout=10)  # noqa: B023
        assert lags and gauges, "its lag and gauges were looked at after the message"
        # then at rest: five commit rounds and metrics intervals in a row pass it by
        wait_until(lambda: _quiet_for(lags, 1.0) and _quiet_for(gauges, 1.0), timeout=10)
        assert consumer.metrics.inflight == 0 and receiver.lag == 0
        lags.clear()
        gauges.clear()


def test_the_head_at_rest_waits_until_its_next_commit_round_and_a_record_or_a_new_lane_ends_the_rest(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At rest the head waits for a record until its next commit round (0.2 s here), not every 0.1 s; a record
    still ends the wait at once and is committed, and a subscription created meanwhile gets its lane without a
    Kafka consumer of its own."""
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    receiver = _receiver(hermes, topic, name)
    wait_until(lambda: receiver.in_lanes, timeout=20)
    polls: list[tuple[float, float, int]] = []  # (timeout, seconds waited, the topic's records) of the head's polls
    own_consumers: list[str] = []
    poll, own_consumer = BrokerConsumer.poll, SharedReceiver._own_consumer

    def counted_poll(self: BrokerConsumer, max_messages: int = 500, timeout: float = 0.1, **kw: Any) -> list[Message]:
        started = time.monotonic()
        messages = poll(self, max_messages, timeout, **kw)
        if threading.current_thread().name == "shared-reader":
            polls.append((timeout, time.monotonic() - started, sum(m.topic == topic for m in messages)))
        return messages

    def counted_own_consumer(self: SharedReceiver) -> BrokerConsumer:
        own_consumers.append(self._name)
        return own_consumer(self)

    monkeypatch.setattr(BrokerConsumer, "poll", counted_poll)
    monkeypatch.setattr(SharedReceiver, "_own_consumer", counted_own_consumer)
    time.sleep(2.0)
    rested = list(polls)
    assert len(rested) <= 15, f"the head woke {len(rested)} times in 2 s at rest (every 0.1 s: 20)"
    assert max(timeout for timeout, _, _ in rested) > 0.1
    client.publish(topic, '{"n": 1}')
    subscriber.wait_for(1, timeout=20)
    wait_until(lambda: committed(hermes, topic, name) == 1, timeout=10, interval=0.2)
    [(timeout, waited)] = [(t, w) for t, w, n in polls if n]
    assert waited < timeout, "the record ended the head's wait"
    other = client.create_topic()
    later = client.create_subscription(other, subscriber.url, subscriptionPolicy=FAST)
    wait_until(lambda: _receiver(hermes, other, later).in_lanes, timeout=20)
    assert not [n for n in own_consumers if n.endswith(f"${later}")], (
        "its lane came within the wait a new subscription gives the head"
    )


def committed(hermes: InProcessHermes, topic: str, name: str) -> int:
    """Messages of the (fresh) topic below the subscription's committed offsets."""
    assert hermes.hermes.connection is not None
    return sum(BrokerAdmin(hermes.hermes.connection).committed_offsets(f"hermes_{topic}_{name}", topic).values())


def _message(partition: int, offset: int, size: int = 10, topic: str = "t") -> Message:
    return Message(topic, partition, offset, f"id{offset}", b"x" * size, 0)


@pytest.mark.unit
def test_runs_split_a_read_by_partition_in_order() -> None:
    read = [_message(0, 1), _message(0, 2), _message(1, 7), _message(0, 3), _message(0, 9, topic="u")]
    assert [(p, [m.offset for m in run]) for p, run in _runs(read)] == [
        (("t", 0), [1, 2]),
        (("t", 1), [7]),
        (("t", 0), [3]),
        (("u", 0), [9]),  # the same partition number of another topic: another run
    ]
    assert list(_runs([])) == []


@pytest.mark.unit
def test_a_byte_budget_takes_what_fits_and_at_least_one() -> None:
    read = [_message(0, i, size=100) for i in range(5)]
    assert len(_within(read, 250)) == 2
    assert len(_within(read, 50)) == 1  # one larger than what is left still goes, as a group member reads it
    assert _within(read, 0) == []


class _Committer:
    def __init__(self, busy: bool) -> None:
        self.busy = busy
        self.commits = 0

    def commit(self) -> bool:
        if self.busy:
            self.commits += 1
        return self.busy


@pytest.mark.unit
def test_commit_rounds_take_turns_within_their_budget() -> None:
    receivers = [_Committer(busy=index % 2 == 0) for index in range(10)]  # 5 with something to commit
    turn = 0
    for _ in range(5):
        turn, _, sent = commit_in_turn(receivers, turn, budget=2)
        assert sent == 2
    # 5 rounds of 2 commits over 5 busy receivers: each committed twice, none left out
    assert [r.commits for r in receivers if r.busy] == [2, 2, 2, 2, 2]
    idle = [_Committer(busy=False) for _ in range(3)]
    assert commit_in_turn(idle, 1, budget=2) == (1, 3, 0)  # every one asked; none sent: the turn stays
    assert commit_in_turn([], 4, budget=2) == (0, 0, 0)


@pytest.mark.unit
def test_a_commit_round_goes_in_steps() -> None:
    """A round's commits are sent a few after each read of the head, not all at once."""
    receivers = [_Committer(busy=index != 1) for index in range(5)]
    turn, asked, sent = commit_in_turn(receivers, 0, budget=2, visits=5)
    assert (turn, asked, sent) == (3, 3, 2)  # the one with nothing to commit was asked on the way
    turn, asked, sent = commit_in_turn(receivers, turn, budget=2, visits=5 - asked)
    assert (turn, asked, sent) == (0, 2, 2)  # the round's visits are spent: it stops where it began
    assert [r.commits for r in receivers] == [1, 0, 1, 1, 1]


def _members(kafka: EmbeddedBroker, count: int) -> list[tuple[SerialConsumer, SharedReceiver]]:
    """``count`` SERIAL subscriptions' consumers in the lane of partition ("t", 0) at offset 0, as the head sees them
    (not started: nothing is delivered)."""
    context = ConsumerContext(
        connection=KafkaConnection(kafka.bootstrap_servers),
        sender=None,  # type: ignore[arg-type]
        repository=None,  # type: ignore[arg-type]
        content=None,  # type: ignore[arg-type]
        node_id="n",
        cluster="c",
        read_ahead_messages=3,
        read_ahead_bytes=4096,
    )
    reader = SharedReader(context)
    members = []
    for index in range(count):
        subscription = Subscription(TopicName("g", "t"), f"s{index}", EndpointAddress("http://x"))
        receiver = reader.receiver(f"g.t$s{index}", "t", f"group{index}", context, lambda _: None)
        consumer = SerialConsumer(Delivery(subscription, context), receiver, lambda _: None)
        receiver._flow = consumer
        receiver._next[("t", 0)] = 0
        members.append((consumer, receiver))
    return members


@pytest.mark.unit
def test_a_run_goes_whole_to_members_with_room_and_in_part_to_the_others(kafka: EmbeddedBroker) -> None:
    (whole, a), (ahead, b), (short, c), (few_bytes, d) = _members(kafka, 4)
    b._next[("t", 0)] = 2  # had offsets 0 and 1 already
    c._tracker.read(("t", 0), list(range(100, 201)))  # room for 100 + 3 - 101 = 2 more
    few_bytes.read_ahead.count([_message(0, 99, size=4096 - 25)])  # room for 25 bytes: 2 of the run's 10 each
    run = _Run([_message(0, offset) for offset in range(4)])
    handoffs: list[Handoff] = []
    assert [r.offer(("t", 0), run, handoffs) for r in (a, b, c, d)] == [True, True, False, False]
    assert [[m.offset for m in taken] for _, taken, _ in handoffs] == [[0, 1, 2, 3], [2, 3], [0, 1], [0, 1]]
    assert [r.next_offset(("t", 0)) for r in (a, b, c, d)] == [4, 4, 2, 2]
    assert [r.unfinished() for r in (a, b, c, d)] == [4, 2, 103, 2]
    # what each took counts in its read-ahead's bytes (the budget of its next read)
    assert whole.read_ahead.byte_budget() == 4096 - 40
    assert ahead.read_ahead.byte_budget() == 4096 - 20
    assert short.read_ahead.byte_budget() == 4096 - 20


@pytest.mark.unit
def test_a_subscription_changed_to_a_larger_inflight_size_takes_more(kafka: EmbeddedBroker) -> None:
    [(consumer, receiver)] = _members(kafka, 1)
    assert consumer.bounds()[0] == DEFAULT_INFLIGHT_SIZE + 3
    receiver._tracker.read(("t", 0), list(range(1000, 1000 + DEFAULT_INFLIGHT_SIZE + 3)))  # full
    run = _Run([_message(0, 0)])
    handoffs: list[Handoff] = []
    assert not receiver.offer(("t", 0), run, handoffs)
    policy = dataclasses.replace(consumer._delivery.subscription.serial_policy, inflight_size=DEFAULT_INFLIGHT_SIZE + 1)
    consumer._delivery.update(dataclasses.replace(consumer._delivery.subscription, serial_policy=policy))
    assert consumer.bounds()[0] == DEFAULT_INFLIGHT_SIZE + 4
    assert receiver.offer(("t", 0), run, handoffs)
    assert [m.offset for _, taken, _ in handoffs for m in taken] == [0]


def test_the_threads_of_a_running_hermes_carry_their_names_to_the_os(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url)
    client.publish(topic, "{}")
    wait_until(lambda: subscriber.received, timeout=30)
    names = set(thread_names())  # besides librdkafka's own (rdk:main, ...)
    assert {"shared-reader", "sqlite-watch", "idempotency-key"} <= names, sorted(names)

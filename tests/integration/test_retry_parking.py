"""subscriptionPolicy.retryParking against the real broker and a real subscriber: a message waiting for a long
retry waits in the retry topic, its partition moves on, and it comes back when due."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.domain.message import RETRY_COUNT_HEADER
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Received, Reply, SubscriberServer

pytestmark = pytest.mark.integration


@pytest.fixture
def subscriber() -> Iterator[SubscriberServer]:
    server = SubscriberServer().start()
    yield server
    server.stop()


def first_fails(retry_after: str) -> object:
    """The first request of each message fails with 503 and ``Retry-After``; the others succeed."""
    seen: set[str | None] = set()

    def script(_n: int, request: Received) -> Reply:
        if request.message_id in seen:
            return Reply(200)
        seen.add(request.message_id)
        return Reply(503, {"Retry-After": retry_after})

    return script


def test_a_message_waiting_for_a_long_retry_is_parked_and_its_partition_moves_on(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    policy = {"messageTtl": 60, "requestTimeout": 10_000, "retryParking": {"thresholdMs": 1000}}
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy)
    shown = client.management.get(f"/topics/{topic}/subscriptions/{name}").json()
    assert shown["subscriptionPolicy"]["retryParking"] == {"thresholdMs": 1000}
    consumer = hermes.consumer(topic, name)
    subscriber.script = first_fails("3")  # type: ignore[assignment]
    client.publish(topic, '{"n": 0}')
    subscriber.wait_for(1, timeout=30)
    subscriber.script = lambda _n, _r: Reply(200)
    for n in range(1, 4):
        client.publish(topic, f'{{"n": {n}}}')
    subscriber.wait_for(4, timeout=30)  # the later messages overtook the parked one
    wait_until(lambda: consumer.metrics.totals.get("parked") == 1, timeout=5)  # once Kafka acknowledged it
    metrics = f"/topics/{topic}/subscriptions/{name}/metrics"
    wait_until(lambda: client.management.get(metrics).json()["parkedNow"] == 1, timeout=5)  # while it waits
    admin = BrokerAdmin(hermes.hermes.connection)
    # the partition's committed offset is past the parked message before its retry
    wait_until(lambda: sum(admin.committed_offsets(f"hermes_{topic}_{name}", topic).values()) == 4, timeout=10)
    assert len(subscriber.received) == 4
    requests = subscriber.wait_for(5, timeout=30)
    first, retried = requests[0], requests[4]
    assert retried.message_id == first.message_id and retried.body == first.body
    assert retried.headers[RETRY_COUNT_HEADER] == "1"
    assert retried.at - first.at >= 2.9  # Retry-After: 3, counted from the failed attempt
    wait_until(lambda: consumer.metrics.totals.get("unparked") == 1, timeout=5)
    retry_topic = f"{topic}..{name}..parked"
    group = f"hermes-parked_{topic}_{name}"
    wait_until(lambda: sum(admin.committed_offsets(group, retry_topic).values()) == 1, timeout=10)
    assert len(subscriber.received) == 5
    wait_until(lambda: client.management.get(metrics).json()["parkedNow"] == 0, timeout=5)
    client.management.delete(f"/topics/{topic}/subscriptions/{name}")
    wait_until(lambda: not admin.topic_exists(retry_topic), timeout=10)


def test_without_parking_a_long_retry_waits_in_memory_as_in_hermes(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy={"messageTtl": 60})
    consumer = hermes.consumer(topic, name)
    subscriber.script = first_fails("1")  # type: ignore[assignment]
    client.publish(topic, '{"n": 0}')
    requests = subscriber.wait_for(2, timeout=30)
    assert requests[1].headers[RETRY_COUNT_HEADER] == "1"
    assert "parked" not in consumer.metrics.totals
    assert "parkedNow" not in client.management.get(f"/topics/{topic}/subscriptions/{name}/metrics").json()
    assert not BrokerAdmin(hermes.hermes.connection).topic_exists(f"{topic}..{name}..parked")


def test_suspending_stops_a_message_waiting_for_a_retry_at_once_and_activating_resumes_it(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    """Hermes issue #1645: while another delivery is still being sent (which a stop waits for), the message
    waiting for its retry makes no attempt once the subscription is suspended."""
    topic = client.create_topic()
    policy = {"messageBackoff": 200, "messageTtl": 120, "requestTimeout": 10_000}
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy)
    consumer = hermes.consumer(topic, name)
    slow, retry = Reply(200, delay=4), Reply(503, {"Retry-After": "1"})  # Retry-After: the rate stays as it is
    subscriber.script = lambda _n, r: slow if r.body == b'{"slow": 1}' else retry
    client.publish(topic, '{"failing": 1}')
    subscriber.wait_for(2, timeout=30)  # failing, retried
    client.publish(topic, '{"slow": 1}')
    wait_until(lambda: any(r.body == b'{"slow": 1}' for r in subscriber.received), timeout=30)
    client.set_state(topic, name, "SUSPENDED")
    seen = time.monotonic() + 1.0  # the consumer is told within a metadata poll (50 ms here)
    wait_until(lambda: consumer.metrics.totals["delivered"] == 1, timeout=20)  # the stop waited for the slow one
    failing = [r for r in subscriber.received if r.body == b'{"failing": 1}']
    assert [r for r in failing if r.at > seen] == []
    subscriber.script = lambda _n, _r: Reply(200)
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: len([r for r in subscriber.received if r.body == b'{"failing": 1}']) > len(failing), 30)
    resumed = [r for r in subscriber.received if r.body == b'{"failing": 1}'][len(failing)]
    assert resumed.headers[RETRY_COUNT_HEADER] == str(len(failing))  # counted on: nothing was lost

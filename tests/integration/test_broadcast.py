"""ANYCAST and BROADCAST over several real subscriber instances, named by the static address-list resolver."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.metadata.documents import UNDELIVERED_LAST
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Reply, SubscriberServer, always

pytestmark = pytest.mark.integration

POLICY = {"messageBackoff": 300, "messageTtl": 60, "requestTimeout": 10_000}


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    # a failing instance's attempts may put the rate limiter in its heartbeat mode when a busy machine stretches
    # the backoffs across a rate period: a heartbeat a second, not a minute, keeps these tests about broadcast
    return {
        "endpoint_address_resolver": "hermes.consumers.resolver:StaticAddressList",
        "consumer_heartbeat_interval": 1.0,
    }


def instance(servers: list[SubscriberServer], script: object) -> SubscriberServer:
    server = SubscriberServer(script).start()  # type: ignore[arg-type]
    servers.append(server)
    return server


def committed(hermes: InProcessHermes, topic: str, name: str) -> int:
    """Messages of the (fresh) topic below the subscription's committed offsets."""
    assert hermes.hermes.connection is not None
    return sum(BrokerAdmin(hermes.hermes.connection).committed_offsets(f"hermes_{topic}_{name}", topic).values())


def test_broadcast_retries_only_the_failing_instance_and_commits_when_all_took_the_message(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    healthy = instance(servers, always(200))
    flaky = instance(servers, lambda n, _r: Reply(500) if n < 3 else Reply(200))
    topic = client.create_topic()
    name = client.create_subscription(
        topic,
        healthy.url,
        mode="BROADCAST",
        endpointAddressResolverMetadata={"addresses": [healthy.url, flaky.url]},
        subscriptionPolicy=POLICY,
    )
    message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]
    flaky.wait_for(2, timeout=20)
    assert committed(hermes, topic, name) == 0, "committed while an instance still fails"
    flaky.wait_for(4, timeout=20)
    wait_until(lambda: committed(hermes, topic, name) == 1, timeout=10, interval=0.2)
    time.sleep(0.6)  # two backoffs: time for an attempt that must not happen
    assert [r.headers["Hermes-Retry-Count"] for r in healthy.received] == ["0"]
    assert [r.headers["Hermes-Retry-Count"] for r in flaky.received] == ["0", "1", "2", "3"]
    assert {r.message_id for r in healthy.received + flaky.received} == {message_id}
    metrics = f"/topics/{topic}/subscriptions/{name}/metrics"
    wait_until(lambda: client.management.get(metrics).json()["delivered"] == 1, timeout=10)


def test_broadcast_discards_at_the_ttl_naming_the_failing_instances(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    healthy = instance(servers, always(200))
    broken = instance(servers, always(500))
    topic = client.create_topic()
    name = client.create_subscription(
        topic,
        healthy.url,
        mode="BROADCAST",
        endpointAddressResolverMetadata={"addresses": [healthy.url, broken.url]},
        subscriptionPolicy={**POLICY, "messageBackoff": 200, "messageTtl": 1},
    )
    client.publish(topic, '{"doomed": "partly"}')
    repository = hermes.hermes.repository
    assert repository is not None
    wait_until(lambda: repository.get_document(UNDELIVERED_LAST, f"{topic}${name}") is not None, 15)
    record = repository.get_document(UNDELIVERED_LAST, f"{topic}${name}")
    assert record is not None
    assert record["reason"] == (
        f"Message sending failed for instances: {broken.url} (Message sending failed with status code:500)"
    )
    assert len(healthy.received) == 1 and len(broken.received) >= 2
    wait_until(lambda: committed(hermes, topic, name) == 1, timeout=10, interval=0.2)


def test_broadcast_discards_a_message_an_instance_refuses_once_every_instance_is_done(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    flaky = instance(servers, lambda n, _r: Reply(500 if n == 0 else 200))
    refusing = instance(servers, always(400))
    topic = client.create_topic()
    name = client.create_subscription(
        topic,
        flaky.url,
        mode="BROADCAST",
        endpointAddressResolverMetadata={"addresses": [flaky.url, refusing.url]},
        subscriptionPolicy={**POLICY, "messageBackoff": 100},
    )
    client.publish(topic, '{"refused": "by one"}')
    repository = hermes.hermes.repository
    assert repository is not None
    wait_until(lambda: repository.get_document(UNDELIVERED_LAST, f"{topic}${name}") is not None, 15)
    record = repository.get_document(UNDELIVERED_LAST, f"{topic}${name}")
    assert record is not None
    assert record["reason"] == (
        f"Message sending failed for instances: {refusing.url} (Message sending failed with status code:400)"
    ), "named although its refusal came an attempt before the message was done"
    assert len(flaky.received) == 2 and len(refusing.received) == 1, "a 4xx is not retried"
    wait_until(lambda: committed(hermes, topic, name) == 1, timeout=10, interval=0.2)


def test_anycast_sends_to_one_instance_and_retries_at_the_next(
    client: HermesClient, servers: list[SubscriberServer]
) -> None:
    first = instance(servers, lambda n, _r: Reply(503) if n == 0 else Reply(200))
    second = instance(servers, always(200))
    topic = client.create_topic()
    client.create_subscription(
        topic,
        first.url,
        endpointAddressResolverMetadata={"addresses": [first.url, second.url]},
        subscriptionPolicy=POLICY,
    )
    client.publish(topic, '{"n": 1}')
    second.wait_for(1, timeout=20)
    client.publish(topic, '{"n": 2}')
    first.wait_for(2, timeout=20)
    time.sleep(0.6)
    assert [r.headers["Hermes-Retry-Count"] for r in first.received] == ["0", "0"]
    assert [(r.body, r.headers["Hermes-Retry-Count"]) for r in second.received] == [(b'{"n": 1}', "1")]


def test_bad_resolver_metadata_is_retried_and_discarded_with_the_reason(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = instance(servers, always(200))
    topic = client.create_topic()
    name = client.create_subscription(
        topic,
        subscriber.url,
        mode="BROADCAST",
        endpointAddressResolverMetadata={"addresses": "not a list"},
        subscriptionPolicy={**POLICY, "messageBackoff": 200, "messageTtl": 1},
    )
    client.publish(topic, '{"n": 1}')
    repository = hermes.hermes.repository
    assert repository is not None
    wait_until(lambda: repository.get_document(UNDELIVERED_LAST, f"{topic}${name}") is not None, 15)
    record = repository.get_document(UNDELIVERED_LAST, f"{topic}${name}")
    assert record is not None and record["reason"] == (
        "Message sending failed: endpointAddressResolverMetadata.addresses: must be a non-empty list of URLs"
    )
    assert subscriber.received == []

"""A failing subscriber against the real broker: what the adaptive rate limiter, messageTtl and an update of the
subscription do to the messages in flight, and how the failures show in the log. Durations are shortened: the
heartbeat mode attempts once per HEARTBEAT seconds instead of once a minute."""

from __future__ import annotations

import itertools
import logging
import re
import time
from typing import Any

import pytest

from hermes.consumers.rate import RateMode
from hermes.metadata.documents import UNDELIVERED_LAST
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Reply, SubscriberServer, always

pytestmark = pytest.mark.integration

HEARTBEAT = 6.0  # the bounds below leave a loaded machine a few seconds, and fail by more without the fixes


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"consumer_rate_period": 0.2, "consumer_heartbeat_interval": HEARTBEAT, "consumer_failure_log_interval": 1.0}


def serve(servers: list[SubscriberServer], script: Any) -> SubscriberServer:
    server = SubscriberServer(script).start()
    servers.append(server)
    return server


def publish(client: HermesClient, topic: str, count: int) -> None:
    for i in range(count):
        assert client.publish(topic, f'{{"n": {i}}}').status_code in (201, 202)


def update(client: HermesClient, topic: str, name: str, **fields: Any) -> float:
    """PUTs the changed fields; when the answer came (time.monotonic())."""
    response = client.management.put(f"/topics/{topic}/subscriptions/{name}", json=fields)
    assert response.status_code == 200, response.text
    return time.monotonic()


def test_an_endpoint_change_reaches_retries_waiting_for_the_heartbeat(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    old, new = serve(servers, always(500)), serve(servers, always(200))
    topic = client.create_topic()
    name = client.create_subscription(topic, old.url, subscriptionPolicy={"messageBackoff": 100, "messageTtl": 120})
    consumer = hermes.consumer(topic, name)
    publish(client, topic, 3)
    old.wait_for(3, timeout=20)
    wait_until(lambda: consumer.rate.mode is RateMode.HEARTBEAT, timeout=15)  # retries now wait for the heartbeat
    updated = update(client, topic, name, endpoint=new.url)
    received = new.wait_for(3, timeout=4 * HEARTBEAT + 10)
    assert received[-1].at - updated < 3.0, "the retries waited for the old endpoint's heartbeat slots"
    assert not [r for r in old.received if r.at > received[0].at], "a retry went to the old endpoint after the change"


def test_an_endpoint_change_wakes_retries_waiting_for_their_backoff(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    old, new = serve(servers, always(503, **{"Retry-After": "30"})), serve(servers, always(200))
    topic = client.create_topic()
    name = client.create_subscription(topic, old.url, subscriptionPolicy={"messageTtl": 120})
    consumer = hermes.consumer(topic, name)
    publish(client, topic, 3)
    old.wait_for(3, timeout=20)  # each message now waits 30 s for its retry
    updated = update(client, topic, name, endpoint=new.url)
    received = new.wait_for(3, timeout=40)
    assert received[-1].at - updated < 3.0, "the retries waited out the old endpoint's Retry-After"
    assert len(old.received) == 3 and consumer.rate.mode is RateMode.NORMAL


def test_message_ttl_holds_while_messages_wait_for_the_heartbeat(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, always(500))
    topic = client.create_topic()
    name = client.create_subscription(
        topic, subscriber.url, subscriptionPolicy={"messageBackoff": 100, "messageTtl": 2}
    )
    consumer = hermes.consumer(topic, name)
    published = time.monotonic()
    publish(client, topic, 5)
    wait_until(lambda: consumer.metrics.totals["discarded"] == 5, timeout=5 * HEARTBEAT + 10)
    assert time.monotonic() - published < 2 + 3.0, "messages outlived their messageTtl waiting for the limiter"
    repository = hermes.hermes.repository
    assert repository is not None
    wait_until(lambda: repository.get_document(UNDELIVERED_LAST, f"{topic}${name}") is not None)
    record = repository.get_document(UNDELIVERED_LAST, f"{topic}${name}")
    assert record is not None and record["reason"] == "Message sending failed with status code:500"


def test_the_first_success_in_heartbeat_mode_ends_the_heartbeat_waits(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    status = [500]
    subscriber = serve(servers, lambda n, _r: Reply(status[0]))
    topic = client.create_topic()
    name = client.create_subscription(
        topic, subscriber.url, subscriptionPolicy={"messageBackoff": 100, "messageTtl": 120}
    )
    consumer = hermes.consumer(topic, name)
    publish(client, topic, 3)
    subscriber.wait_for(3, timeout=20)
    wait_until(lambda: consumer.rate.mode is RateMode.HEARTBEAT, timeout=15)
    status[0] = 200  # the subscriber comes back: the next heartbeat attempt succeeds
    wait_until(lambda: consumer.metrics.totals["delivered"] == 3, timeout=3 * HEARTBEAT + 10)
    delivered = [r.at for r in subscriber.received[-3:]]
    assert delivered[-1] - delivered[0] < 3.0, f"after the first success the next ones waited: {delivered}"


def test_failed_attempts_are_logged_once_per_interval_without_credentials(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hermes.consumers")
    subscriber = serve(servers, always(503, **{"Retry-After": "0"}))  # retried at once, not slowed down
    topic = client.create_topic()
    endpoint = subscriber.url.replace("http://", "http://alice:s3cret@")
    name = client.create_subscription(topic, endpoint, subscriptionPolicy={"rate": 20, "messageTtl": 3})
    hermes.consumer(topic, name)
    publish(client, topic, 2)
    consumer = hermes.consumer(topic, name)
    wait_until(lambda: consumer.metrics.totals["discarded"] == 2, timeout=15)
    pattern = re.compile(
        rf"delivery to {re.escape(topic)}\${name} failing: (\d+) attempts? failed in the last [\d.]+ s, "
        rf"last: HTTP 503 from {re.escape(subscriber.url)}$"
    )

    def lines() -> list[tuple[float, int]]:
        return [(r.created, int(m[1])) for r in caplog.records if (m := pattern.match(r.getMessage()))]

    wait_until(lambda: sum(n for _, n in lines()) == len(subscriber.received), timeout=5)  # the last ones, too
    logged = lines()
    assert 2 <= len(logged) <= 5 < len(subscriber.received), logged
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(logged)]
    assert min(gaps) >= 0.95, f"more than one line per interval: {gaps}"
    assert "s3cret" not in caplog.text and "alice" not in caplog.text


def test_a_subscriber_refusing_every_message_is_reported_and_its_discards_logged_once_per_interval(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer], caplog: pytest.LogCaptureFixture
) -> None:
    """As Hermes: a 4xx not retried (retryClientErrors false) discards the message, and a subscriber answering
    mostly 4xx is RECEIVING_MALFORMED_MESSAGES."""
    caplog.set_level(logging.INFO, logger="hermes.consumers")
    refusing = serve(servers, always(400))
    topic = client.create_topic()
    name = client.create_subscription(topic, refusing.url)
    consumer = hermes.consumer(topic, name)
    publish(client, topic, 20)
    wait_until(lambda: consumer.metrics.totals["discarded"] == 20, timeout=15)
    assert consumer.metrics.totals["delivered"] == 0
    record = client.management.get(f"/topics/{topic}/subscriptions/{name}/undelivered/last").json()
    assert record["reason"] == "Message sending failed with status code:400"

    health = f"/topics/{topic}/subscriptions/{name}/health"
    wait_until(lambda: client.management.get(health).json()["status"] == "UNHEALTHY", timeout=15)
    codes = [p["code"] for p in client.management.get(health).json()["problems"]]
    assert codes == ["RECEIVING_MALFORMED_MESSAGES"], codes

    pattern = re.compile(
        rf"delivery to {re.escape(topic)}\${name} gave up: (\d+) messages? discarded in the last [\d.]+ s, "
        r"last reason: Message sending failed with status code:400$"
    )

    def lines() -> list[int]:
        return [int(m[1]) for r in caplog.records if (m := pattern.match(r.getMessage()))]

    wait_until(lambda: sum(lines()) == 20, timeout=5)  # the last ones, too
    assert len(lines()) <= 4, f"one line per interval, not per message: {lines()}"


def test_an_unknown_host_is_named_in_the_undelivered_reason_and_the_log(
    client: HermesClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hermes.consumers")
    topic = client.create_topic()
    name = client.create_subscription(
        topic, "http://my-servce.invalid/events", subscriptionPolicy={"messageTtl": 1, "messageBackoff": 300}
    )
    publish(client, topic, 1)
    path = f"/topics/{topic}/subscriptions/{name}/undelivered/last"
    wait_until(lambda: client.management.get(path).status_code == 200, timeout=15)
    assert client.management.get(path).json()["reason"] == "Message sending failed: host not found: my-servce.invalid"
    assert "last: host not found: my-servce.invalid (sending to http://my-servce.invalid/events)" in caplog.text
    assert "gaierror" not in caplog.text


def test_failing_subscribers_do_not_hold_back_a_healthy_one(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, servers: list[SubscriberServer]
) -> None:
    """Beside two subscriptions of its topic that time out and answer 500, a healthy one gets every message at
    once while their limiters keep them to the slow rate. How much they cost its latency: `hermes bench`'s
    scenario 4b (hermes.bench.isolation)."""
    timing_out = serve(servers, lambda _n, _r: Reply(delay=1.0))  # past its requestTimeout
    answering_500 = serve(servers, always(500))
    topic = client.create_topic()
    healthy = client.create_subscription(topic, subscriber.url)
    failing = {
        endpoint: hermes.consumer(
            topic, client.create_subscription(topic, endpoint.url, subscriptionPolicy={"requestTimeout": timeout})
        )
        for endpoint, timeout in ((timing_out, 200), (answering_500, 1000))
    }
    hermes.consumer(topic, healthy)
    publish(client, topic, 10)
    subscriber.wait_for(10, timeout=20)
    wait_until(lambda: all(c.rate.mode is not RateMode.NORMAL for c in failing.values()), timeout=15)
    attempts = [len(endpoint.received) for endpoint in failing]
    began = time.monotonic()
    publish(client, topic, 50)
    received = subscriber.wait_for(60, timeout=10)  # about a second unloaded
    took = time.monotonic() - began
    assert len({r.message_id for r in received}) == 60
    extra = [len(endpoint.received) - n for endpoint, n in zip(failing, attempts, strict=True)]
    assert max(extra) <= took + 2, f"{extra} attempts in {took:.1f} s: a failing subscription was not slowed down"

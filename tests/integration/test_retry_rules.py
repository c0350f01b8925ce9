"""Status rules, backoff jitter and the stop-retry header against the real broker and real subscribers: what each
makes of a failed answer, for SERIAL and BATCH delivery, and how it shows in the metrics."""

from __future__ import annotations

import itertools
import re
from typing import Any

import orjson
import pytest

from hermes.metadata.documents import UNDELIVERED_LAST
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Received, Reply, SubscriberServer, always

pytestmark = pytest.mark.integration


def serve(servers: list[SubscriberServer], script: Any) -> SubscriberServer:
    server = SubscriberServer(script).start()
    servers.append(server)
    return server


def by_body(**answers: list[int]) -> Any:
    """Answers each message by its ``{"n": name}``: its list of statuses, one per attempt (the last repeats)."""
    attempts: dict[str, int] = {}

    def script(_i: int, request: Received) -> Reply:
        name = orjson.loads(request.body)["n"]
        attempt = attempts[name] = attempts.get(name, -1) + 1
        statuses = answers[name]
        return Reply(statuses[min(attempt, len(statuses) - 1)])

    return script


def bodies(server: SubscriberServer, name: str) -> list[Received]:
    return [r for r in server.received if orjson.loads(r.body) == {"n": name}]


def publish(client: HermesClient, topic: str, *names: str) -> None:
    for name in names:
        assert client.publish(topic, orjson.dumps({"n": name})).status_code in (201, 202)


def test_a_subscription_retries_409_but_not_400_and_gives_up_as_its_rules_say(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(
        servers, by_body(conflict=[409, 409, 200], invalid=[400], worthless=[500], poisoned=[422], down=[502, 200])
    )
    topic = client.create_topic()
    rules = [
        {"status": "409", "action": "RETRY"},
        {"status": "500", "action": "DISCARD"},
        {"status": "422", "action": "DEAD_LETTER"},
    ]
    name = client.create_subscription(
        topic, subscriber.url, subscriptionPolicy={"messageBackoff": 50, "statusRules": rules}
    )
    consumer = hermes.consumer(topic, name)
    publish(client, topic, "conflict", "invalid", "worthless", "poisoned", "down")
    wait_until(lambda: consumer.metrics.totals["delivered"] == 2 and consumer.metrics.totals["discarded"] == 3)
    attempts = {n: len(bodies(subscriber, n)) for n in ("conflict", "invalid", "worthless", "poisoned", "down")}
    assert attempts == {"conflict": 3, "invalid": 1, "worthless": 1, "poisoned": 1, "down": 2}
    totals = consumer.metrics.totals
    assert (totals["ruleRetry"], totals["ruleDiscard"], totals["ruleDeadLetter"], totals["ruleRetryAfter"]) == (
        2,
        1,
        1,
        0,
    )
    labels = f'action="DISCARD",subscription="{name}",topic="{topic}"'
    counted = f"hermes_consumers_status_rule_actions_total{{{labels}}} 1.0"
    # Prometheus gets a subscription's counts with its metrics snapshot, every metrics interval
    wait_until(lambda: counted in client.management.get("/status/prometheus").text, timeout=10)


def test_the_undelivered_record_names_the_rule_that_gave_up(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, always(410))
    topic = client.create_topic()
    rules = [{"status": "400-409", "action": "RETRY"}, {"status": "4xx", "action": "DEAD_LETTER"}]
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy={"statusRules": rules})
    consumer = hermes.consumer(topic, name)
    publish(client, topic, "gone")
    wait_until(lambda: consumer.metrics.totals["discarded"] == 1)
    repository = hermes.hermes.repository
    assert repository is not None
    wait_until(lambda: repository.get_document(UNDELIVERED_LAST, f"{topic}${name}") is not None)
    record = repository.get_document(UNDELIVERED_LAST, f"{topic}${name}")
    assert record is not None and record["reason"] == (
        "Message sending failed with status code:410 (subscriptionPolicy.statusRules[1]: DEAD_LETTER)"
    )


def test_retry_after_waits_the_rules_delay_in_place_of_the_subscribers_retry_after(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda i, _r: Reply(503, {"Retry-After": "0"}) if i < 2 else Reply(200))
    topic = client.create_topic()
    rules = [{"status": "503", "action": "RETRY_AFTER", "delay": 700}]
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy={"statusRules": rules})
    consumer = hermes.consumer(topic, name)
    publish(client, topic, "later")
    received = subscriber.wait_for(3, timeout=20)
    gaps = [b.at - a.at for a, b in itertools.pairwise(received)]
    assert all(0.65 <= gap < 0.7 + 2.5 for gap in gaps), gaps
    wait_until(lambda: consumer.metrics.totals["delivered"] == 1)
    assert consumer.metrics.totals["ruleRetryAfter"] == 2


def test_rules_decide_for_a_batch_as_for_one_message(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda i, _r: Reply(409 if i == 0 else 200))
    topic = client.create_topic()
    rules = [{"status": "409", "action": "RETRY"}]
    policy = {"batchSize": 2, "batchTime": 5000, "messageBackoff": 50, "statusRules": rules}
    name = client.create_subscription(topic, subscriber.url, deliveryType="BATCH", subscriptionPolicy=policy)
    consumer = hermes.consumer(topic, name)
    publish(client, topic, "first", "second")
    wait_until(lambda: consumer.metrics.totals["delivered"] == 2)
    assert len(subscriber.received) == 2 and consumer.metrics.totals["ruleRetry"] == 2
    assert orjson.loads(subscriber.received[0].body) == orjson.loads(subscriber.received[1].body)


def test_a_subscriber_ends_retries_with_its_header_only_where_the_subscription_allows_it(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, always(500, **{"Hermes-Retry": "stop"}))
    topic = client.create_topic()
    policy = {"messageBackoff": 50, "messageTtl": 10}
    allowed = client.create_subscription(
        topic, subscriber.url + "allowed", subscriptionPolicy={**policy, "stopRetryHeaderAllowed": True}
    )
    ignored = client.create_subscription(topic, subscriber.url + "ignored", subscriptionPolicy=policy)
    consumers = hermes.consumer(topic, allowed), hermes.consumer(topic, ignored)
    publish(client, topic, "stop")
    wait_until(lambda: consumers[0].metrics.totals["discarded"] == 1)
    wait_until(lambda: len([r for r in subscriber.received if r.path == "/ignored"]) >= 3)
    assert len([r for r in subscriber.received if r.path == "/allowed"]) == 1
    assert consumers[0].metrics.totals["retriesStopped"] == 1 and consumers[1].metrics.totals["retriesStopped"] == 0


def test_full_jitter_spreads_the_retries_of_messages_that_failed_together(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    failing = [f"f{i}" for i in range(10)]
    answers = {n: [500, 200] for n in failing} | {f"ok{i}": [200] for i in range(30)}
    subscriber = serve(servers, by_body(**answers))
    topic = client.create_topic()
    policy = {"messageBackoff": 2000, "backoffJitter": "FULL"}
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy)
    consumer = hermes.consumer(topic, name)
    # two successes before each failure: no second of attempts has most of them failing, which would slow down
    publish(client, topic, *(n for i, f in enumerate(failing) for n in (f"ok{2 * i}", f"ok{2 * i + 1}", f)))
    publish(client, topic, *(f"ok{i}" for i in range(20, 30)))
    wait_until(lambda: consumer.metrics.totals["delivered"] == 40, timeout=30)
    waits = sorted(retry.at - first.at for first, retry in (bodies(subscriber, n) for n in failing))
    assert all(0 <= wait < 2.0 + 1.5 for wait in waits), waits
    assert waits[-1] - waits[0] > 0.5, f"the retries were not spread: {waits}"


def test_retry_settings_are_validated_on_update_and_answered(client: HermesClient) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://localhost:1/")
    path = f"/topics/{topic}/subscriptions/{name}"
    bad = {"subscriptionPolicy": {"statusRules": [{"status": "409", "action": "RETRY"}, {"status": "4xx"}]}}
    refused = client.management.put(path, json=bad)
    assert refused.status_code == 400 and re.search(r"statusRules\[1\]\.action: is required", refused.text)
    good = {"subscriptionPolicy": {"statusRules": [{"status": "409", "action": "RETRY"}], "backoffJitter": "EQUAL"}}
    updated = client.management.put(path, json=good)
    assert updated.status_code == 200 and "Hermes-Ignored-Fields" not in updated.headers
    policy = client.management.get(path).json()["subscriptionPolicy"]
    assert policy["statusRules"] == [{"status": "409", "action": "RETRY"}] and policy["backoffJitter"] == "EQUAL"
    assert policy["messageBackoff"] == 100 and "stopRetryHeaderAllowed" not in policy

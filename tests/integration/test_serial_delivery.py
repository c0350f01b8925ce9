"""SERIAL delivery against the real broker and real, scripted subscriber endpoints."""

from __future__ import annotations

import base64
import itertools
import threading
import time

import pytest

from hermes.domain.message import KAFKA_MESSAGE_ID, KAFKA_PUBLISH_TIMESTAMP, KAFKA_SCHEMA_VERSION
from hermes.metadata.documents import SUBSCRIPTION_METRICS, UNDELIVERED_LAST
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.key_order import assert_one_after_another, keyed_script, publish_keyed, received, requests_by_key
from tests.support.subscriber import Received, Reply, SubscriberServer

pytestmark = pytest.mark.integration

# requestTimeout is generous: a slow answer under load would legitimately add a retry to the counts
FAST = {"messageBackoff": 100, "messageTtl": 60, "requestTimeout": 10_000}


def serve(servers: list[SubscriberServer], script: object) -> SubscriberServer:
    server = SubscriberServer(script).start()  # type: ignore[arg-type]
    servers.append(server)
    return server


def first_then_ok(status: int, **headers: str) -> object:
    return lambda n, _r: Reply(status, dict(headers)) if n == 0 else Reply(200)


@pytest.mark.parametrize(
    ("status", "retry_client_errors", "headers", "attempts"),
    [
        (400, False, {}, 1),
        (400, True, {}, 2),
        (429, False, {}, 1),
        (429, True, {}, 2),
        (429, True, {"Retry-After": "0"}, 2),
        (500, False, {}, 2),
        (503, False, {}, 2),
        (503, False, {"Retry-After": "0"}, 2),
    ],
)
def test_each_row_of_the_status_table(
    client: HermesClient,
    servers: list[SubscriberServer],
    status: int,
    retry_client_errors: bool,
    headers: dict[str, str],
    attempts: int,
) -> None:
    subscriber = serve(servers, first_then_ok(status, **headers))
    topic = client.create_topic()
    client.create_subscription(
        topic, subscriber.url, subscriptionPolicy={**FAST, "retryClientErrors": retry_client_errors}
    )
    assert client.publish(topic, '{"n": 1}').status_code == 201
    received = subscriber.wait_for(attempts, timeout=20)
    time.sleep(0.5)  # five backoffs: time for a retry that must not happen
    assert len(subscriber.received) == attempts
    assert [r.headers["Hermes-Retry-Count"] for r in received] == [str(i) for i in range(attempts)]
    assert len({r.message_id for r in received}) == 1


def test_request_headers(client: HermesClient, servers: list[SubscriberServer]) -> None:
    subscriber = serve(servers, lambda n, r: Reply(200))
    topic = client.create_topic()
    endpoint = subscriber.url.replace("http://", "http://alice:s3cret@")
    name = client.create_subscription(
        topic,
        endpoint,
        headers=[{"name": "X-Team", "value": "orders"}],
        subscriptionIdentityHeadersEnabled=True,
        subscriptionPolicy=FAST,
    )
    response = client.publish(topic, '{"n": 1}')
    [received] = subscriber.wait_for(1, timeout=20)
    assert received.headers["Hermes-Message-Id"] == response.headers["Hermes-Message-Id"]
    assert received.headers["X-Team"] == "orders"
    assert received.headers["Hermes-Topic-Name"] == topic
    assert received.headers["Hermes-Subscription-Name"] == name
    assert received.headers["Authorization"] == "Basic " + base64.b64encode(b"alice:s3cret").decode()


def test_the_publishers_trace_context_goes_to_every_attempt_with_tracing_off(
    client: HermesClient, servers: list[SubscriberServer]
) -> None:
    attempts = itertools.count()  # of the traced message: its first fails
    subscriber = serve(servers, lambda _n, r: Reply(503 if b'"n": 1' in r.body and not next(attempts) else 200))
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    context = {"traceparent": f"00-{trace_id}-{span_id}-01", "tracestate": "congo=t61rcWkgMzE"}
    client.publish(topic, '{"n": 1}', context)
    client.publish(topic, '{"n": 2}', {"traceparent": f"00-{trace_id}-{'0' * 16}-01", "tracestate": "a=b"})  # invalid
    client.publish(topic, '{"n": 3}')
    received = subscriber.wait_for(4, timeout=20)
    traced = [r for r in received if b'"n": 1' in r.body]
    assert [r.headers["Hermes-Retry-Count"] for r in traced] == ["0", "1"]
    parents = [r.headers["traceparent"].split("-") for r in traced]
    assert [(p[0], p[1], p[3]) for p in parents] == [("00", trace_id, "01")] * 2  # the publisher's trace
    spans = [p[2] for p in parents]
    assert len(set(spans)) == 2 and span_id not in spans  # a span of its own for each attempt
    assert [r.headers["tracestate"] for r in traced] == ["congo=t61rcWkgMzE"] * 2
    untraced = [r for r in received if b'"n": 1' not in r.body]
    assert untraced and all("traceparent" not in r.headers and "tracestate" not in r.headers for r in untraced)


def test_backoff_grows_exponentially(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(500) if n < 3 else Reply(200))
    topic = client.create_topic()
    name = client.create_subscription(
        topic, subscriber.url, subscriptionPolicy={"messageBackoff": 150, "backoffMultiplier": 2, "messageTtl": 60}
    )
    hermes.consumer(topic, name)  # its rate limiter counts periods from here
    # The first attempt must open a period of the limiter: one ending between the retries would see them all
    # failed and turn it SLOW (1/s) before the last retry, rightly, but this test is about the backoff alone.
    time.sleep(hermes.hermes.settings.consumer_rate_period)
    client.publish(topic, '{"n": 1}')
    received = subscriber.wait_for(4, timeout=20)
    gaps = [b.at - a.at for a, b in itertools.pairwise(received)]
    for gap, expected in zip(gaps, (0.15, 0.3, 0.6), strict=True):
        assert expected <= gap < expected + 0.25, gaps


def test_an_expired_message_is_discarded_and_recorded_as_undelivered(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(500))
    topic = client.create_topic()
    name = client.create_subscription(
        topic, subscriber.url, subscriptionPolicy={"messageBackoff": 200, "messageTtl": 1}
    )
    client.publish(topic, '{"doomed": true}')
    subscriber.wait_for(2, timeout=20)
    repository = hermes.hermes.repository
    assert repository is not None
    wait_until(lambda: repository.get_document(UNDELIVERED_LAST, f"{topic}${name}") is not None, 10)
    record = repository.get_document(UNDELIVERED_LAST, f"{topic}${name}")
    assert record is not None
    assert record["status"] == "DISCARDED" and record["message"] == '{"doomed": true}'
    assert record["reason"] == "Message sending failed with status code:500"
    assert record["topicName"] == topic and record["subscription"] == name and record["cluster"] == "primary"
    attempts = len(subscriber.received)
    time.sleep(0.5)
    assert len(subscriber.received) == attempts, "no attempts after the discard"

    def discarded() -> bool:
        snapshots = repository.list_documents(SUBSCRIPTION_METRICS)
        return any(
            k.startswith(f"{topic}${name}/") and v["discarded"] == 1 and v["codes5xx"] == attempts
            for k, v in snapshots.items()
        )

    wait_until(discarded, 10)


def test_filters_skip_messages_and_their_offsets_are_committed(
    client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(200))
    topic = client.create_topic()
    client.create_subscription(
        topic,
        subscriber.url,
        subscriptionPolicy=FAST,
        filters=[
            {"type": "jsonpath", "path": "$.user.status", "matcher": "new"},
        ],
    )
    for status in ("old", "new", "newer", "new"):
        client.publish(topic, f'{{"user": {{"status": "{status}"}}}}')
    received = subscriber.wait_for(2, timeout=20)
    time.sleep(0.3)
    assert [r.body for r in subscriber.received] == [b'{"user": {"status": "new"}}'] * 2
    assert all(isinstance(r, Received) for r in received)


def test_the_rate_is_a_hard_maximum(client: HermesClient, servers: list[SubscriberServer]) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(200))
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url, subscriptionPolicy={"rate": 10})
    for i in range(15):
        client.publish(topic, f'{{"n": {i}}}')
    received = subscriber.wait_for(15, timeout=30)
    for first, eleventh in zip(received, received[10:], strict=False):
        assert eleventh.at - first.at >= 0.95, "more than 10 messages within one second"


def started(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer], within: float
) -> tuple[SubscriberServer, str, str]:
    """A new subscription to a subscriber that always answers 200, once its consumer has started (which must
    take less than ``within`` seconds): the subscriber, the topic and the subscription's name."""
    subscriber = serve(servers, lambda n, _r: Reply(200))
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    hermes.consumer(topic, name, within)
    return subscriber, topic, name


def test_a_new_subscription_gets_its_consumer_within_a_second(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber, topic, _ = started(hermes, client, servers, within=1.0)
    client.publish(topic, '{"n": 1}')  # published before the consumer joined its group: delivered all the same
    [received] = subscriber.wait_for(1, timeout=20)
    assert received.body == b'{"n": 1}'


def test_a_subscription_suspended_while_its_consumer_joins_delivers_once_active_again(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    """A member that leaves its group while the group is still forming must not leave the group unusable for
    the next member."""
    subscriber, topic, name = started(hermes, client, servers, within=5.0)
    hermes.suspend(client, topic, name)  # at once: the group may still be forming
    client.set_state(topic, name, "ACTIVE")
    assert client.publish(topic, '{"n": 1}').status_code == 201
    [received] = subscriber.wait_for(1, timeout=15)
    assert received.body == b'{"n": 1}'


def test_suspended_subscriptions_resume_where_they_stopped(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(200))
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    client.publish(topic, '{"n": 1}')
    subscriber.wait_for(1, timeout=20)
    state = f"/topics/{topic}/subscriptions/{name}/state"
    assert (
        client.management.put(state, content='"SUSPENDED"', headers={"Content-Type": "application/json"}).status_code
        == 200
    )
    supervisor = hermes.hermes.supervisor
    assert supervisor is not None
    wait_until(lambda: (topic, name) not in supervisor.consumers, timeout=20)  # it stopped and committed
    client.publish(topic, '{"n": 2}')
    time.sleep(1.0)
    assert len(subscriber.received) == 1, "nothing is sent while suspended"
    assert (
        client.management.post(state, content='"ACTIVE"', headers={"Content-Type": "application/json"}).status_code
        == 200
    )
    received = subscriber.wait_for(2, timeout=20)
    assert received[1].body == b'{"n": 2}'


def test_a_busy_subscription_is_reconfigured_in_place_losing_and_repeating_nothing(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    before, after = serve(servers, lambda n, _r: Reply(200)), serve(servers, lambda n, _r: Reply(200))
    topic = client.create_topic()
    policy = {**FAST, "rate": 60, "inflightSize": 5}
    name = client.create_subscription(topic, before.url, subscriptionPolicy=policy)
    supervisor = hermes.hermes.supervisor
    assert supervisor is not None
    published: list[str] = []

    def publish(count: int) -> None:
        for i in range(count):
            response = client.publish(topic, f'{{"n": {i}}}')
            assert response.status_code in (201, 202), response.text
            published.append(response.headers["Hermes-Message-Id"])

    publisher = threading.Thread(target=publish, args=(300,))
    publisher.start()
    before.wait_for(40, timeout=30)
    consumer = supervisor.consumers[(topic, name)]
    change = {"endpoint": after.url, "subscriptionPolicy": {**policy, "rate": 150, "inflightSize": 20}}
    assert client.management.put(f"/topics/{topic}/subscriptions/{name}", json=change).status_code == 200
    after.wait_for(1, timeout=20)
    publisher.join(60)
    assert len(published) == 300

    def everything_arrived() -> bool:
        return set(published) <= {r.message_id for r in before.received + after.received}

    wait_until(everything_arrived, timeout=30, interval=0.2)
    time.sleep(0.5)
    ids = [r.message_id for r in before.received + after.received]
    assert len(ids) == len(set(ids)) == 300, "a message came twice"
    assert supervisor.consumers[(topic, name)] is consumer, "restarted instead of reconfigured"
    assert consumer.rate.max_rate == 150 and consumer.subscription.serial_policy.inflight_size == 20
    assert len(after.received) > 100


def test_records_with_headers_hermes_cannot_read_are_delivered_all_the_same(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    """Another producer wrote to the topic with broken Hermes headers: the consumer must not stop at them."""
    subscriber = serve(servers, lambda n, _r: Reply(200))
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    producer = hermes.hermes.producer
    assert producer is not None
    broken = [(KAFKA_PUBLISH_TIMESTAMP, b"yesterday"), (KAFKA_SCHEMA_VERSION, b"v2"), (KAFKA_MESSAGE_ID, b"\xff\n")]
    broken += [("h-traceparent", b"00-cut-short"), ("h-tracestate", b"a=b")]  # a trace context not to pass on

    async def produce() -> None:
        await producer.send(topic, b'{"raw": true}', headers=broken)

    hermes.call(produce())
    client.publish(topic, '{"n": 2}')
    received = subscriber.wait_for(2, timeout=20)
    assert sorted(r.body for r in received) == [b'{"n": 2}', b'{"raw": true}']
    raw = next(r for r in received if r.body == b'{"raw": true}')
    assert raw.message_id is not None and raw.message_id.startswith(f"{topic}-")
    assert "traceparent" not in raw.headers and "tracestate" not in raw.headers


def test_an_avro_record_that_is_no_record_of_its_schema_is_discarded_with_the_reason_in_words(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    """Another producer wrote bytes that are no record of the topic's schema: a JSON subscription cannot have them
    converted, so the message is discarded at once (not retried, not a crash of the consumer)."""
    subscriber = serve(servers, lambda n, _r: Reply(200))
    schema = {"type": "record", "name": "Visit", "fields": [{"name": "city", "type": "string"}]}
    topic = client.create_topic(contentType="AVRO", schema=schema)
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    producer = hermes.hermes.producer
    assert producer is not None
    headers = [(KAFKA_MESSAGE_ID, b"cut-short"), (KAFKA_PUBLISH_TIMESTAMP, b"1"), (KAFKA_SCHEMA_VERSION, b"1")]

    async def produce() -> None:
        await producer.send(topic, b"\x14abc", headers=headers)  # a 10-byte string with 3 bytes

    hermes.call(produce())
    client.publish(topic, '{"city": "Warsaw"}')
    [received] = subscriber.wait_for(1, timeout=20)
    assert received.body == b'{"city":"Warsaw"}'
    path = f"/topics/{topic}/subscriptions/{name}/undelivered/last"
    wait_until(lambda: client.management.get(path).status_code == 200, timeout=15)
    assert client.management.get(path).json()["reason"] == (
        f"the message is not Avro binary of schema version 1 of {topic}: the body ends before its record does "
        "(cut short, or written with another schema)"
    )
    wait_until(lambda: hermes.consumer(topic, name).metrics.totals["discarded"] == 1, timeout=10)
    assert len(subscriber.received) == 1


def test_suspending_a_failing_subscription_does_not_wait_for_its_retries(
    client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(500))
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy={"messageBackoff": 10_000})
    for i in range(5):
        client.publish(topic, f'{{"n": {i}}}')
    subscriber.wait_for(5, timeout=20)  # every message is now waiting 10 s for its retry
    state = f"/topics/{topic}/subscriptions/{name}/state"
    started = time.monotonic()
    assert client.management.put(state, content='"SUSPENDED"', headers={"Content-Type": "application/json"})
    thread = f"consumer-{topic}${name}"
    wait_until(lambda: thread not in {t.name for t in threading.enumerate()}, timeout=20)
    assert time.monotonic() - started < 4.0, "the stop waited for deliveries that were only waiting"
    assert len(subscriber.received) == 5


def test_inflight_size_one_sends_a_backlog_one_message_at_a_time_in_order(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(200, delay=0.05))
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy={**FAST, "inflightSize": 1})
    client.publish(topic, '{"warm": 1}')
    subscriber.wait_for(1, timeout=20)
    hermes.suspend(client, topic, name)
    for i in range(12):  # a backlog on one partition: the next poll could take all of it at once
        assert client.publish(topic, f'{{"n": {i}}}', headers={"Partition-Key": "one"}).status_code == 201
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: sum(b'"n"' in r.body for r in subscriber.received) >= 12, timeout=30)
    received = [r for r in subscriber.received if b'"n"' in r.body]  # the warm-up message may come again
    assert [r.body for r in received] == [f'{{"n": {i}}}'.encode() for i in range(12)]
    gaps = [b.at - a.at for a, b in itertools.pairwise(received)]
    assert min(gaps) >= 0.045, f"two messages were in flight at once: gaps {gaps}"


def test_sending_delay_holds_a_first_attempt_until_that_long_after_publishing(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(500) if n == 0 else Reply(200))
    topic = client.create_topic()
    policy = {**FAST, "sendingDelay": 1000, "inflightSize": 1}
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy)
    published = time.monotonic()
    client.publish(topic, '{"first": 1}')
    first, retry = subscriber.wait_for(2, timeout=20)
    assert first.at - published >= 1.0
    assert retry.at - first.at < 0.9, "a retry waits its backoff, not the sending delay again"
    hermes.suspend(client, topic, name)
    for i in range(5):
        assert client.publish(topic, f'{{"n": {i}}}').status_code == 201
    time.sleep(1.0)  # the backlog is older than the delay
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: sum(b'"n"' in r.body for r in subscriber.received) >= 5, timeout=30)
    backlog = [r.at for r in subscriber.received if b'"n"' in r.body]
    assert backlog[-1] - backlog[0] < 1.0, "one message in flight: a delay per message would take 4 s"


# --- ordering by key (subscriptionPolicy.ordering: KEY) ---

KEYED = {**FAST, "inflightSize": 10, "ordering": "KEY"}


def test_key_ordering_holds_a_failing_key_alone_and_delivers_each_key_in_order(
    client: HermesClient, servers: list[SubscriberServer]
) -> None:
    script, answers = keyed_script(failures=3)
    subscriber = serve(servers, script)
    topic = client.create_topic()
    policy = {**KEYED, "messageBackoff": 300}
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy, state="SUSPENDED")
    publish_keyed(client, topic, 8)  # a backlog: all of it can be read at once
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: sum(answers) >= 24, timeout=30)
    requests = requests_by_key(subscriber, answers)
    for key, sent in requests.items():
        assert [n for n, ok, _ in sent if ok] == list(range(8)), key
        assert [n for n, _, _ in sent] == sorted(n for n, _, _ in sent), f"{key} went out of order: {sent}"
        assert_one_after_another(sent)
    assert [ok for _, ok, _ in requests["a"][:4]] == [False, False, False, True]
    # three backoffs of 300 ms hold "a": the other keys were not held with it
    a_second = next(at for n, _, at in requests["a"] if n == 1)
    assert max(at for key in "bc" for _, _, at in requests[key]) < a_second


def test_key_ordering_survives_a_consumer_restart_redelivering_in_order(
    hermes: InProcessHermes, client: HermesClient, servers: list[SubscriberServer]
) -> None:
    script, answers = keyed_script(hang=("b", 5))
    subscriber = serve(servers, script)
    topic = client.create_topic()
    # b5 times out and waits 2 s for its retry: the stop cuts it short, unfinished
    policy = {**KEYED, "requestTimeout": 1000, "messageBackoff": 2000}
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=policy, state="SUSPENDED")
    publish_keyed(client, topic, 25)
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: ("b", 5) in received(subscriber), timeout=30)
    hermes.suspend(client, topic, name)  # stops the consumer in the middle: it commits what is finished
    assert len(received(subscriber)) < 75, "the restart came after the end"
    client.set_state(topic, name, "ACTIVE")
    wait_until(lambda: all((key, 24) in received(subscriber) for key in "abc"), timeout=30)
    requests = requests_by_key(subscriber, answers)
    for key, sent in requests.items():
        ns = [n for n, _, _ in sent]
        # in order, nothing skipped; the restart sends again from an earlier message, once
        steps = [b - a for a, b in itertools.pairwise(ns)]
        assert ns[0] == 0 and all(step == 1 or step <= 0 for step in steps), f"{key}: {ns}"
        assert sum(step <= 0 for step in steps) <= 1, f"{key}: {ns}"
        assert_one_after_another(sent)
    assert [n for n, _, _ in requests["b"]].count(5) == 2, "b5 came again after the restart"


def test_key_ordering_sends_messages_without_a_key_in_parallel(
    client: HermesClient, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(200, delay=0.5))
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, subscriptionPolicy=KEYED, state="SUSPENDED")
    for i in range(5):
        assert client.publish(topic, f'{{"n": {i}}}').status_code == 201
    client.set_state(topic, name, "ACTIVE")
    received = subscriber.wait_for(5, timeout=30)
    assert received[-1].at - received[0].at < 0.5, "each its own key: none waited for another's answer"

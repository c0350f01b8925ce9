"""hermes.client against a running broker: publishing, management, errors, and the subscriber helpers receiving
real (signed, BATCH, back-pressured) deliveries."""

from __future__ import annotations

import asyncio
import base64
import secrets
import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from hermes import errors
from hermes.client import AsyncHermesClient, Connection, HermesClient
from hermes.client.subscriber import Answer, Delivery, WsgiSubscriber
from tests.support.hermes import InProcessHermes, unique
from tests.support.subscriber import SubscriberServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture
def api(hermes: InProcessHermes) -> Iterator[HermesClient]:
    with HermesClient(Connection(hermes.management_url, hermes.frontend_url)) as client:
        yield client


def _topic(api: HermesClient) -> str:
    group = unique("g")
    api.create_group(group)
    name = f"{group}.{unique('topic')}"
    api.create_topic(name)
    return name


class _Quiet(WSGIRequestHandler):
    def log_message(self, *_: object) -> None:
        pass


class WsgiEndpoint:
    """A real WSGI server (the standard library's) in a thread, serving a ``WsgiSubscriber``."""

    def __init__(self, app: WsgiSubscriber) -> None:
        self.server = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"

    def __enter__(self) -> WsgiEndpoint:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_publish_answers_the_message_id_and_the_subscriber_gets_it(
    api: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = _topic(api)
    api.create_subscription(topic, "printer", subscriber.url)
    wait_until(lambda: api.subscription(topic, "printer")["state"] == "ACTIVE", timeout=20)
    result = api.publish(topic, {"orderId": 42}, partition_key="customer-7")
    # 202 when the busy test machine's broker acked after ACK_TIMEOUT_MS: accepted all the same
    assert result.status in (201, 202) and result.accepted == (result.status == 202) and result.message_id
    (received,) = subscriber.wait_for(1)
    assert received.message_id == result.message_id and received.body == b'{"orderId": 42}'


def test_publish_many_publishes_each_body_once_in_order(api: HermesClient) -> None:
    topic = _topic(api)
    outcomes = api.publish_many(topic, [{"n": n} for n in range(20)], concurrency=4)
    assert all(not isinstance(o, errors.HermesError) and o.status in (201, 202) for o in outcomes), outcomes
    assert len({o.message_id for o in outcomes if not isinstance(o, errors.HermesError)}) == 20
    missing = api.publish_many(f"{topic}-missing", [b"{}"])
    assert isinstance(missing[0], errors.TopicNotFound)


def test_management_round_trip(api: HermesClient) -> None:
    topic = _topic(api)
    group = topic.split(".")[0]
    assert topic in api.topics(group) and group in api.groups()
    api.update_topic(topic, description="orders, as placed")
    assert api.topic(topic)["description"] == "orders, as placed"
    api.create_subscription(topic, "billing", "http://127.0.0.1:1/", description="billing")
    assert api.subscriptions(topic) == ["billing"]
    api.suspend(topic, "billing")
    assert api.subscription(topic, "billing")["state"] == "SUSPENDED"
    assert api.last_undelivered(topic, "billing") is None
    assert "lag" in api.subscription_metrics(topic, "billing")
    assert "published" in api.topic_metrics(topic)
    api.delete_subscription(topic, "billing")
    api.delete_topic(topic)
    assert topic not in api.topics(group)


def test_errors_are_the_projects_types_with_the_apis_message(api: HermesClient) -> None:
    with pytest.raises(errors.TopicNotFound) as missing:
        api.topic("nogroup.nothing")
    assert "nogroup.nothing" in missing.value.message
    with pytest.raises(errors.ValidationError) as invalid:
        api.create_topic("no-dot-in-this-name")
    assert "name" in invalid.value.message
    topic = _topic(api)
    with pytest.raises(errors.TopicAlreadyExists):
        api.create_topic(topic)
    with pytest.raises(errors.ValidationError, match="retransmissionDate"):
        api.create_subscription(topic, "s", "http://127.0.0.1:1/")
        api.retransmit(topic, "s", "yesterday")


def test_an_unreachable_broker_is_service_unavailable() -> None:
    with (
        HermesClient(Connection("http://127.0.0.1:1", "http://127.0.0.1:1")) as client,
        pytest.raises(errors.ServiceUnavailable, match=r"127\.0\.0\.1:1"),
    ):
        client.topics()


def test_the_async_client_does_the_same(hermes: InProcessHermes, api: HermesClient) -> None:
    topic = _topic(api)

    async def scenario() -> tuple[list[str], list[object]]:
        async with AsyncHermesClient(Connection(hermes.management_url, hermes.frontend_url)) as client:
            await client.create_subscription(topic, "async", "http://127.0.0.1:1/")
            published = await client.publish_many(topic, [b'{"a": 1}'] * 10, concurrency=3)
            with pytest.raises(errors.SubscriptionNotFound):
                await client.subscription(topic, "nobody")
            return await client.subscriptions(topic), published

    names, published = asyncio.run(scenario())
    assert names == ["async"] and all(getattr(p, "status", p) in (201, 202) for p in published)
    assert len(published) == 10


def test_a_wsgi_subscriber_verifies_signed_batches_and_pushes_back(api: HermesClient) -> None:
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    got: list[Delivery] = []

    def handle(delivery: Delivery) -> Answer | None:
        got.append(delivery)
        return Answer.retry_later(1) if len(got) == 1 else None  # back pressure once, then taken

    topic = _topic(api)
    with WsgiEndpoint(WsgiSubscriber(handle, secrets=[secret])) as endpoint:
        policy = {"batchSize": 3, "batchTime": 200, "batchVolume": 64000, "messageTtl": 60, "requestTimeout": 5000}
        api.create_subscription(
            topic, "batched", endpoint.url, deliveryType="BATCH", subscriptionPolicy=policy, signingSecrets=[secret]
        )
        wait_until(lambda: api.subscription(topic, "batched")["state"] == "ACTIVE", timeout=20)
        ids = [r.message_id for r in api.publish_many(topic, [{"n": n} for n in range(3)]) if hasattr(r, "message_id")]
        wait_until(lambda: len(got) >= 2, timeout=30)
    first, second = got[:2]
    assert first.is_batch and second.message_id == first.message_id  # the same batch, retried
    assert second.retry_count == 1 and sorted(second.message_ids) == sorted(ids)
    assert sorted(m["n"] for m in second.messages()) == [0, 1, 2]


def test_a_wsgi_subscriber_refuses_what_no_secret_of_its_signed(api: HermesClient) -> None:
    got: list[Delivery] = []
    mine = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    theirs = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    topic = _topic(api)
    with WsgiEndpoint(WsgiSubscriber(got.append, secrets=[mine])) as endpoint:
        api.create_subscription(topic, "forged", endpoint.url, signingSecrets=[theirs])
        wait_until(lambda: api.subscription(topic, "forged")["state"] == "ACTIVE", timeout=20)
        api.publish(topic, b"{}")
        wait_until(lambda: api.subscription_metrics(topic, "forged")["totals"].get("codes4xx", 0) >= 1, timeout=30)
    assert got == []

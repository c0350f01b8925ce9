"""OpenTelemetry tracing on (``--tracing``): the spans Hermes exports over OTLP/HTTP to a real receiver, decoded
from protobuf, and the trace context the subscriber gets with each attempt."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.hermes import HermesClient
from tests.support.otlp import CLIENT, CONSUMER, ERROR, PRODUCER, SERVER, ExportedSpan, OtlpReceiver
from tests.support.subscriber import Received, Reply, SubscriberServer

pytestmark = pytest.mark.integration

FAST = {"messageBackoff": 50, "messageTtl": 60, "requestTimeout": 10_000}
PUBLISHER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PUBLISHER_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module")
def hermes_overrides(otlp: OtlpReceiver) -> Iterator[dict[str, Any]]:
    with otlp.exporting():  # for the module's Hermes, made while this lasts
        yield {"tracing": True}


def serve(servers: list[SubscriberServer], script: Any = None) -> SubscriberServer:
    server = SubscriberServer(script).start()
    servers.append(server)
    return server


def by_name(spans: list[ExportedSpan], prefix: str) -> list[ExportedSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def traceparent(received: Received) -> tuple[str, str, str, str]:
    version, trace_id, span_id, flags = received.headers["traceparent"].split("-")
    return version, trace_id, span_id, flags


def test_a_publish_and_its_delivery_are_spans_of_the_publishers_trace(
    client: HermesClient, otlp: OtlpReceiver, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers)
    topic = client.create_topic()
    subscription = client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    headers = {"traceparent": f"00-{PUBLISHER_TRACE}-{PUBLISHER_SPAN}-01", "tracestate": "vendor=opaque,other=1"}
    published = client.publish(topic, '{"n": 1}', headers)
    assert published.status_code == 201

    [received] = subscriber.wait_for(1, timeout=20)
    assert received.headers["tracestate"] == "vendor=opaque,other=1"  # passed on unchanged
    spans = otlp.wait_for(4, PUBLISHER_TRACE)
    [publish] = by_name(spans, "publish ")
    [ack] = by_name(spans, "ack ")
    [deliver] = by_name(spans, "deliver ")
    [send] = by_name(spans, "send ")
    assert (publish.name, publish.kind, publish.parent_span_id) == (f"publish {topic}", SERVER, PUBLISHER_SPAN)
    assert publish.attributes["http.response.status_code"] == 201
    assert publish.attributes["messaging.message.id"] == published.headers["Hermes-Message-Id"]
    assert (ack.kind, ack.parent_span_id, ack.role) == (PRODUCER, publish.span_id, "frontend")
    qualified = f"{topic}${subscription}"
    assert (deliver.name, deliver.kind, deliver.parent_span_id) == (f"deliver {qualified}", CONSUMER, publish.span_id)
    assert deliver.attributes["hermes.subscription"] == qualified
    assert deliver.attributes["hermes.delivery.status"] == "DELIVERED"
    assert (deliver.role, deliver.service) == ("consumers", "hermes")
    assert (send.kind, send.parent_span_id, send.attributes["http.response.status_code"]) == (
        CLIENT,
        deliver.span_id,
        200,
    )
    # the subscriber's traceparent is the attempt's span
    assert traceparent(received) == ("00", PUBLISHER_TRACE, send.span_id, "01")


def test_a_retried_delivery_has_a_span_per_attempt(
    client: HermesClient, otlp: OtlpReceiver, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda n, _r: Reply(503 if n < 2 else 200))
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    assert client.publish(topic, '{"n": 2}').status_code == 201  # no traceparent: the frontend starts a trace

    received = subscriber.wait_for(3, timeout=20)
    trace_ids = {traceparent(r)[1] for r in received}
    assert len(trace_ids) == 1
    [trace_id] = trace_ids
    spans = otlp.wait_for(6, trace_id)
    [publish] = by_name(spans, "publish ")
    assert publish.parent_span_id == ""  # the root
    [deliver] = by_name(spans, "deliver ")
    sends = sorted(by_name(spans, "send "), key=lambda span: span.attributes["hermes.retry_count"])
    assert [(s.attributes["hermes.retry_count"], s.attributes["http.response.status_code"]) for s in sends] == [
        (0, 503),
        (1, 503),
        (2, 200),
    ]
    assert [s.status == ERROR for s in sends] == [True, True, False]
    assert {s.parent_span_id for s in sends} == {deliver.span_id}
    assert [traceparent(r)[2] for r in received] == [s.span_id for s in sends]  # each attempt its own span


def test_a_discarded_delivery_says_why(
    client: HermesClient, otlp: OtlpReceiver, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers, lambda _n, _r: Reply(400))
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url, subscriptionPolicy=FAST)
    assert client.publish(topic, '{"n": 3}').status_code == 201

    [received] = subscriber.wait_for(1, timeout=20)
    spans = otlp.wait_for(4, traceparent(received)[1])
    [deliver] = by_name(spans, "deliver ")
    assert deliver.attributes["hermes.delivery.status"] == "DISCARDED"
    assert "400" in deliver.attributes["hermes.reason"]
    assert deliver.status == ERROR


def test_a_batch_is_in_the_trace_of_its_first_message_and_links_the_others(
    client: HermesClient, otlp: OtlpReceiver, servers: list[SubscriberServer]
) -> None:
    subscriber = serve(servers)
    topic = client.create_topic()
    policy = {"batchSize": 2, "batchTime": 10_000, "batchVolume": 64 * 1024, "messageTtl": 60, "requestTimeout": 10_000}
    client.create_subscription(topic, subscriber.url, deliveryType="BATCH", subscriptionPolicy=policy)
    traces = [uuid.uuid4().hex for _ in range(2)]
    for i, trace_id in enumerate(traces):
        headers = {"traceparent": f"00-{trace_id}-{PUBLISHER_SPAN}-01"}
        assert client.publish(topic, f'{{"n": {i}}}', headers).status_code == 201

    [received] = subscriber.wait_for(1, timeout=20)
    first = traceparent(received)[1]
    assert first in traces  # whichever message the batch holds first
    [deliver] = by_name(otlp.wait_for(4, first), "deliver ")  # publish, ack, deliver, send
    assert deliver.attributes["messaging.batch.message_count"] == 2
    [other] = [trace_id for trace_id in traces if trace_id != first]
    [other_publish] = by_name(otlp.wait_for(2, other), "publish ")
    assert deliver.links == (other_publish.span_id,)


def test_a_publish_to_an_unknown_topic_is_a_span_without_its_made_up_name(
    client: HermesClient, otlp: OtlpReceiver
) -> None:
    trace_id = uuid.uuid4().hex
    headers = {"traceparent": f"00-{trace_id}-{PUBLISHER_SPAN}-01"}
    assert client.publish(f"nobody.{uuid.uuid4().hex}", "{}", headers).status_code == 404

    [publish] = otlp.wait_for(1, trace_id)
    assert (publish.name, publish.attributes["http.response.status_code"]) == ("publish", 404)

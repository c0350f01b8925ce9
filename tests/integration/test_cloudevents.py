"""CloudEvents topics against the real frontend, Kafka and subscriber servers: events built by the CloudEvents Python
SDK in binary, structured and batched mode are delivered in binary or structured mode and in batches, where the SDK
reads them back unchanged; the specification's own examples go through; filters address attributes; bad events are
refused with a 400 naming the attribute."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings.http import HTTPMessage, from_http, to_binary, to_structured
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from tests.conftest import wait_until
from tests.support.hermes import HermesClient
from tests.support.subscriber import Received, SubscriberServer

pytestmark = pytest.mark.integration
JSON_FORMAT = JSONFormat()
FAST_BATCH = {"batchSize": 10, "batchTime": 300}


def event(n: int, type_: str = "com.example.order.placed", **attributes: Any) -> CloudEvent:
    return CloudEvent(
        attributes={
            "id": f"order-{n}",
            "source": "/shop/orders",
            "type": type_,
            "subject": f"orders/{n}",
            "time": datetime(2026, 11, 27, 10, 0, n, tzinfo=UTC),
            "datacontenttype": "application/json",
            "comexampletenant": "acme",
            **attributes,
        },
        data={"order": n},
    )


def publish(client: HermesClient, topic: str, message: HTTPMessage) -> int:
    response = client.frontend.post(f"/topics/{topic}", content=message.body, headers=message.headers)
    assert response.status_code in (201, 202), response.text
    return response.status_code


def received_event(request: Received) -> BaseCloudEvent:
    return from_http(HTTPMessage(request.headers, request.body), JSON_FORMAT)


def same(delivered: BaseCloudEvent, published: CloudEvent) -> bool:
    return delivered.get_attributes() == published.get_attributes() and delivered.get_data() == published.get_data()


def test_events_published_in_every_mode_are_delivered_in_every_mode(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic(cloudEvents=True)
    assert client.management.get(f"/topics/{topic}").json()["cloudEvents"] is True
    client.create_subscription(topic, subscriber.url + "binary")
    client.create_subscription(topic, subscriber.url + "structured", cloudEventsMode="STRUCTURED")
    client.create_subscription(topic, subscriber.url + "batch", deliveryType="BATCH", subscriptionPolicy=FAST_BATCH)
    wanted = [{"type": "header", "header": "ce-type", "matcher": "com\\.example\\.order\\.cancelled"}]
    client.create_subscription(topic, subscriber.url + "filtered", filters=wanted)

    binary = event(1)
    octets = CloudEvent(
        attributes={
            "id": "blob-2",
            "source": "/shop/blobs",
            "type": "com.example.blob",
            "datacontenttype": "image/png",
        },
        data=b"\x89PNG\r\n\x1a\n\x00\xff",
    )
    batched = [event(3), event(4, "com.example.order.cancelled")]
    publish(client, topic, to_binary(binary, JSON_FORMAT))
    publish(client, topic, to_structured(octets, JSON_FORMAT))
    batch_body = b"[" + b",".join(JSON_FORMAT.write(e) for e in batched) + b"]"
    response = client.frontend.post(
        f"/topics/{topic}", content=batch_body, headers={"Content-Type": "application/cloudevents-batch+json"}
    )
    assert response.status_code in (201, 202), response.text
    published = [binary, octets, *batched]

    wait_until(lambda: len(delivered(subscriber)) == 4 + 4 + 1 + 4, timeout=60)  # binary, structured, filtered, batched
    by_path: dict[str, list[BaseCloudEvent]] = {}
    for path, request, element in delivered(subscriber):
        by_path.setdefault(path, []).append(received_event(request) if element is None else element)
    for path in ("/binary", "/structured", "/batch"):
        events = {e.get_id(): e for e in by_path[path]}
        for sent in published:
            assert same(events[sent.get_id()], sent), (path, sent.get_id())
    assert [e.get_id() for e in by_path["/filtered"]] == ["order-4"]

    requests = {path: [r for r in subscriber.received if r.path == path] for path in by_path}
    assert not any(r.headers["Content-Type"].startswith("application/cloudevents") for r in requests["/binary"])
    assert {r.headers["Content-Type"] for r in requests["/structured"]} == {"application/cloudevents+json"}
    assert {r.headers["Content-Type"] for r in requests["/batch"]} == {"application/cloudevents-batch+json"}
    png = next(orjson.loads(r.body) for r in requests["/structured"] if b"blob-2" in r.body)
    assert base64.b64decode(png["data_base64"]) == octets.get_data()  # binary data as data_base64


def delivered(subscriber: SubscriberServer) -> list[tuple[str, Received, BaseCloudEvent | None]]:
    """Every request as (path, request, None), but a batch as one (path, request, event) per event it holds."""
    out: list[tuple[str, Received, BaseCloudEvent | None]] = []
    for request in list(subscriber.received):
        if request.path == "/batch":
            out.extend(
                (request.path, request, JSON_FORMAT.read(None, orjson.dumps(e))) for e in orjson.loads(request.body)
            )
        else:
            out.append((request.path, request, None))
    return out


def test_the_specifications_examples_go_through_and_bad_events_are_refused_naming_the_attribute(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic(cloudEvents=True)
    client.create_subscription(topic, subscriber.url)
    # the HTTP binding's binary-mode example, and the JSON format's XML one published structured
    binary = {
        "ce-specversion": "1.0",
        "ce-type": "com.example.someevent",
        "ce-time": "2018-04-05T03:56:24Z",
        "ce-id": "1234-1234-1234",
        "ce-source": "/mycontext/subcontext",
        "Content-Type": "application/json; charset=utf-8",
    }
    assert client.frontend.post(f"/topics/{topic}", content=b'{"appinfoA": "abc"}', headers=binary).status_code == 201
    xml = {
        "specversion": "1.0",
        "type": "com.example.someevent",
        "source": "/mycontext",
        "id": "A234-1234-1234",
        "time": "2018-04-05T17:31:00Z",
        "comexampleextension1": "value",
        "datacontenttype": "application/xml",
        "data": '<much wow="xml"/>',
    }
    structured = {"Content-Type": "application/cloudevents+json"}
    assert client.frontend.post(f"/topics/{topic}", content=orjson.dumps(xml), headers=structured).status_code == 201
    requests = {r.headers["ce-id"]: r for r in subscriber.wait_for(2, timeout=30)}
    assert requests["1234-1234-1234"].body == b'{"appinfoA": "abc"}'
    assert requests["1234-1234-1234"].headers["Content-Type"] == "application/json; charset=utf-8"
    assert requests["A234-1234-1234"].body == b'<much wow="xml"/>'
    assert requests["A234-1234-1234"].headers["Content-Type"] == "application/xml"
    assert requests["A234-1234-1234"].headers["ce-comexampleextension1"] == "value"

    refusals = [
        ({**binary, "ce-id": ""}, b"{}", 400, "ce-id"),
        ({**binary, "ce-time": "tomorrow"}, b"{}", 400, "ce-time"),
        (structured, orjson.dumps({**xml, "specversion": "0.3"}), 400, "specversion"),
        (structured, orjson.dumps({k: v for k, v in xml.items() if k != "source"}), 400, "source"),
        ({"Content-Type": "application/cloudevents-batch+json"}, orjson.dumps([xml, {**xml, "id": 5}]), 400, "[1].id"),
        ({"Content-Type": "application/json"}, b"{}", 415, "ce-specversion"),
    ]
    for headers, body, status, named in refusals:
        response = client.frontend.post(f"/topics/{topic}", content=body, headers=headers)
        assert response.status_code == status, (named, response.text)
        assert named in response.json()["message"], response.text

    refused = client.management.put(f"/topics/{topic}", json={"cloudEvents": False})
    assert refused.status_code == 400 and "cloudEvents" in refused.json()["message"], refused.text
    refused = client.management.post(
        "/topics",
        json={
            "name": f"{topic}avro",
            "owner": {"source": "Plaintext", "id": "t"},
            "contentType": "AVRO",
            "cloudEvents": True,
        },
    )
    assert refused.status_code == 400 and "cloudEvents" in refused.json()["message"], refused.text
    plain = client.create_topic()
    body = {
        "name": "s",
        "endpoint": subscriber.url,
        "owner": {"source": "Plaintext", "id": "t"},
        "cloudEventsMode": "BINARY",
    }
    refused = client.management.post(f"/topics/{plain}/subscriptions", json=body)
    assert refused.status_code == 400 and "cloudEventsMode" in refused.json()["message"], refused.text

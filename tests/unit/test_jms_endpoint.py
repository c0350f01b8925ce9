"""jms:// endpoints: their destination forms, and a delivery's headers as JMS properties."""

from __future__ import annotations

import pytest

from hermes.domain.api_json.oauth_providers import oauth_provider_from_json
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.jms import JmsDestination, jms_destination, jms_properties
from hermes.errors import ValidationError


@pytest.mark.parametrize(
    ("url", "destination"),
    [
        ("jms://broker.example.com/offerWatched", JmsDestination("broker.example.com", 61613, "topic", "offerWatched")),
        ("jms://u:p@10.0.0.1:5445/queue/orders.v1", JmsDestination("10.0.0.1", 5445, "queue", "orders.v1")),
        ("jms://10.0.0.1:5445/topic/prices", JmsDestination("10.0.0.1", 5445, "topic", "prices")),
        ("jms://10.0.0.1:5445/queue", JmsDestination("10.0.0.1", 5445, "topic", "queue")),  # Hermes' form
    ],
)
def test_a_jms_url_names_its_broker_and_destination(url: str, destination: JmsDestination) -> None:
    assert jms_destination(url) == destination
    assert EndpointAddress.parse(url).is_jms


def test_a_jms_endpoint_keeps_its_password_out_of_what_is_shown() -> None:
    endpoint = EndpointAddress.parse("jms://hermes:s3cret@broker:61613/queue/orders")
    assert endpoint.masked == "jms://hermes:*****@broker:61613/queue/orders"
    assert endpoint.url == "jms://broker:61613/queue/orders"
    assert endpoint.credentials == ("hermes", "s3cret")


def test_headers_become_properties_named_without_dashes() -> None:
    headers = {
        "Content-Type": "application/json",
        "Hermes-Message-Id": "m1",
        "Trace-Id": "t1",
        "transaction": "tx",  # would make the broker refuse the frame
        "destination": "/queue/elsewhere",
    }
    assert jms_properties(headers) == {"content-type": "application/json", "HermesMessageId": "m1", "TraceId": "t1"}


def test_an_oauth_token_endpoint_stays_http() -> None:
    body = {"name": "p", "tokenEndpoint": "jms://broker/queue/tokens", "clientId": "c", "clientSecret": "s"}
    with pytest.raises(ValidationError, match="tokenEndpoint: scheme 'jms' is not supported"):
        oauth_provider_from_json(body)

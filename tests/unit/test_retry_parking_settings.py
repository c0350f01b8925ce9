"""subscriptionPolicy.retryParking: validated, answered only when on, and a retry topic no Hermes topic can take."""

import pytest

from hermes.domain import api_json
from hermes.domain.names import TopicName
from hermes.domain.subscription import RetryParking, is_retry_topic
from hermes.errors import ValidationError

pytestmark = pytest.mark.unit
TOPIC = TopicName.parse("pl.allegro.example.myTopic")
PARKING = "subscriptionPolicy.retryParking"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"subscriptionPolicy": {"retryParking": 30000}}, "subscriptionPolicy.retryParking"),
        ({"subscriptionPolicy": {"retryParking": {"thresholdMs": -1}}}, f"{PARKING}.thresholdMs"),
        ({"subscriptionPolicy": {"retryParking": {"thresholdMs": "soon"}}}, f"{PARKING}.thresholdMs"),
        ({"deliveryType": "BATCH", "subscriptionPolicy": {"retryParking": {}}}, "subscriptionPolicy.retryParking"),
        ({"subscriptionPolicy": {"ordering": "KEY", "retryParking": {}}}, "subscriptionPolicy.retryParking"),
        ({"mode": "BROADCAST", "subscriptionPolicy": {"retryParking": {}}}, "subscriptionPolicy.retryParking"),
    ],
)
def test_invalid_parking_names_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as error:
        api_json.subscription_from_json({"name": "s", "endpoint": "http://h/", **body}, TOPIC)
    assert error.value.field == field


def test_parking_is_answered_only_when_on() -> None:
    plain = api_json.subscription_from_json({"name": "s", "endpoint": "http://h/"}, TOPIC)
    assert "retryParking" not in api_json.subscription_to_json(plain)["subscriptionPolicy"]
    off = api_json.subscription_from_json(
        {"name": "s", "endpoint": "http://h/", "subscriptionPolicy": {"retryParking": None}}, TOPIC
    )
    assert off.serial_policy.retry_parking is None
    parked = api_json.subscription_from_json(
        {"name": "s", "endpoint": "http://h/", "subscriptionPolicy": {"retryParking": {}}}, TOPIC
    )
    assert parked.serial_policy.retry_parking == RetryParking(30_000)
    shown = api_json.subscription_to_json(parked)["subscriptionPolicy"]["retryParking"]
    assert shown == {"thresholdMs": 30_000}
    assert api_json.subscription_from_json(api_json.subscription_to_json(parked), TOPIC) == parked


def test_a_retry_topic_is_never_a_hermes_topic_name() -> None:
    sub = api_json.subscription_from_json({"name": "s" * 200, "endpoint": "http://h/"}, TOPIC)
    long_one = api_json.subscription_from_json(
        {"name": "s" * 200, "endpoint": "http://h/"}, TopicName.parse("g" * 200 + ".t")
    )
    for name in (sub.retry_topic, long_one.retry_topic):
        assert is_retry_topic(name) and len(name) <= 249
        with pytest.raises(ValidationError):
            TopicName.parse(name)
    assert (
        long_one.retry_topic
        != api_json.subscription_from_json(
            {"name": "s" * 199 + "x", "endpoint": "http://h/"}, TopicName.parse("g" * 200 + ".t")
        ).retry_topic
    )

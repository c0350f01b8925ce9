import pytest

from hermes.domain import api_json
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.names import TopicName
from hermes.errors import ValidationError

pytestmark = pytest.mark.unit
TOPIC = TopicName.parse("pl.allegro.example.myTopic")


def test_the_group_is_everything_before_the_last_dot() -> None:
    assert (TOPIC.group, TOPIC.name) == ("pl.allegro.example", "myTopic")


def test_a_password_in_the_endpoint_is_kept_but_never_shown() -> None:
    endpoint = EndpointAddress.parse("http://user:s3cret@example.com:8080/path?q=1")
    assert endpoint.credentials == ("user", "s3cret")
    assert endpoint.url == "http://example.com:8080/path?q=1"
    assert "s3cret" not in endpoint.masked and "s3cret" not in repr(endpoint) and "s3cret" not in str(endpoint)


def test_the_older_request_shape_is_accepted() -> None:
    sub = api_json.subscription_from_json(
        {"name": "mySubscription", "endpoint": "http://my-service", "supportTeam": "My Team", "trackingEnabled": True},
        TOPIC,
    )
    assert sub.owner.id == "My Team"
    assert sub.tracking_enabled


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"endpoint": "ftp://x"}, "endpoint"),
        ({"subscriptionPolicy": {"rate": 0}}, "subscriptionPolicy.rate"),
        ({"subscriptionPolicy": {"messageTtl": 7201}}, "subscriptionPolicy.messageTtl"),
        ({"subscriptionPolicy": {"backoffMultiplier": 0.5}}, "subscriptionPolicy.backoffMultiplier"),
        ({"filters": [{"type": "xpath", "path": "$.a", "matcher": "a"}]}, "filters[0].type"),
        ({"filters": [{"type": "jsonpath", "path": "$.a", "matcher": "("}]}, "filters[0].matcher"),
        ({"deliveryType": "BATCH", "mode": "BROADCAST"}, "mode"),
        ({"deliveryType": "BATCH", "contentType": "AVRO"}, "contentType"),
        ({"name": "bad name"}, "name"),
    ],
)
def test_invalid_subscriptions_name_the_field(body: dict[str, object], field: str) -> None:
    request = {"name": "s", "endpoint": "http://service", **body}
    with pytest.raises(ValidationError) as error:
        api_json.subscription_from_json(request, TOPIC)
    assert error.value.field == field


def test_a_subscription_survives_its_storage_round_trip() -> None:
    sub = api_json.subscription_from_json(
        {
            "name": "s",
            "endpoint": "http://u:p@h/",
            "filters": [{"type": "jsonpath", "path": "$.a.*.b", "matcher": "x", "matchingStrategy": "any"}],
            "oAuthPolicy": {"grantType": "password", "providerName": "p", "username": "u", "password": "pw"},
        },
        TOPIC,
    )
    stored = api_json.subscription_to_json(sub, mask_secrets=False)
    assert api_json.subscription_from_json(stored, TOPIC) == sub
    shown = api_json.subscription_to_json(sub)
    assert shown["oAuthPolicy"]["password"] == "******" and ":p@" not in shown["endpoint"]

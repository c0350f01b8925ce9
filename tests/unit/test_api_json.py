import pytest

from hermes.domain import api_json
from hermes.domain.api_json.fields import read_int
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
        ({"subscriptionPolicy": {"ordering": "PARTITION"}}, "subscriptionPolicy.ordering"),
        ({"deliveryType": "BATCH", "subscriptionPolicy": {"ordering": "KEY"}}, "subscriptionPolicy.ordering"),
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
            "subscriptionPolicy": {"ordering": "KEY"},
        },
        TOPIC,
    )
    assert sub.serial_policy.ordering == "KEY"
    stored = api_json.subscription_to_json(sub, mask_secrets=False)
    assert api_json.subscription_from_json(stored, TOPIC) == sub
    shown = api_json.subscription_to_json(sub)
    assert shown["oAuthPolicy"]["password"] == "******" and ":p@" not in shown["endpoint"]


@pytest.mark.parametrize(
    ("endpoint", "said"),
    [
        ("localhost:8299", "has no scheme: write it as http://localhost:8299 (or https://)"),
        ("my-service/events", "has no scheme: write it as http://my-service/events (or https://)"),
        ("ftp://x", "scheme 'ftp' is not supported"),
    ],
)
def test_an_endpoint_without_a_scheme_is_shown_with_one(endpoint: str, said: str) -> None:
    with pytest.raises(ValidationError) as error:
        EndpointAddress.parse(endpoint)
    assert error.value.message.startswith(f"endpoint: {said}")


def test_an_endpoint_without_a_scheme_keeps_its_password_out_of_the_answer() -> None:
    with pytest.raises(ValidationError) as error:
        EndpointAddress.parse("bob:s3cret@service:8080/events")
    assert "s3cret" not in error.value.message and "http://user:password@host:port/path" in error.value.message


@pytest.mark.parametrize(("given", "taken"), [(2, 2), (2.0, 2), ("2", 2), ("-3", -3), ("+40", 40)])
def test_an_integer_field_takes_a_string_of_digits(given: object, taken: int) -> None:
    assert read_int({"n": given}, "n", 0, "n") == taken


@pytest.mark.parametrize("given", ["2.5", "", " 2", "2 ", "abc", "1e3", "\u0663", 2.5, True, [2]])
def test_an_integer_field_refuses_other_strings_and_fractions(given: object) -> None:
    with pytest.raises(ValidationError) as error:
        read_int({"n": given}, "n", 0, "n")
    assert error.value.field == "n"


def test_ordering_is_answered_only_when_set_so_that_hermes_shape_is_unchanged() -> None:
    plain = api_json.subscription_from_json({"name": "s", "endpoint": "http://h/"}, TOPIC)
    assert "ordering" not in api_json.subscription_to_json(plain)["subscriptionPolicy"]
    keyed = api_json.subscription_from_json(
        {"name": "s", "endpoint": "http://h/", "subscriptionPolicy": {"ordering": "KEY"}}, TOPIC
    )
    assert api_json.subscription_to_json(keyed)["subscriptionPolicy"]["ordering"] == "KEY"

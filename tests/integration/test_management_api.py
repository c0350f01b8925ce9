"""The management API with Hermes' request bodies, status codes and error shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes.broker.admin import BrokerAdmin
from hermes.runtime import Role
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, unique
from tests.support.openapi import OPENAPI, conforms_to_openapi

pytestmark = pytest.mark.integration
JSON = {"Content-Type": "application/json"}

# The request bodies of the Hermes subscribing guides, verbatim.
CURRENT_MINIMAL = """{
    "topicName": "group.topic", "name": "mySubscription", "description": "This is my subscription",
    "endpoint": "http://my-service", "owner": {"source": "Plaintext", "id": "My Team"}
}"""
CURRENT_ALL_OPTIONS = """{
    "topicName": "group.topic", "name": "mySubscription", "endpoint": "http://my-service",
    "description": "This is my subscription", "trackingMode": "trackingAll",
    "owner": {"source": "Plaintext", "id": "My Team"}, "contact": "my-team@my-company.com",
    "deliveryType": "SERIAL",
    "subscriptionPolicy": {"rate": 100, "messageTtl": 3600, "retryClientErrors": false, "messageBackoff": 100,
        "requestTimeout": 1000, "socketTimeout": 500, "inflightSize": 100, "backoffMultiplier": 1.0,
        "backoffMaxIntervalInSec": 600},
    "mode": "ANYCAST",
    "headers": [{"name": "SOME_HEADER", "value": "ABC"}, {"name": "OTHER_HEADER", "value": "123"}],
    "filters": [
        {"type": "jsonpath", "path": "$.user.name", "matcher": "^abc.*"},
        {"type": "jsonpath", "path": "$.user.status", "matcher": "new"},
        {"type": "jsonpath", "path": "$.user.name", "matcher": "^abc.*", "matchingStrategy": "all"},
        {"type": "jsonpath", "path": "$.user.status", "matcher": "new"},
        {"type": "jsonpath", "path": "$.addresses.*.country", "matcher": "GB", "matchingStrategy": "any"}
    ],
    "endpointAddressResolverMetadata": {"ignoreMessageHeaders": true, "serviceInstanceId": 123},
    "subscriptionIdentityHeadersEnabled": false
}"""
OLDER_MINIMAL = '{"name": "mySubscription", "endpoint": "http://my-service", "supportTeam": "My Team"}'
OLDER_ALL_OPTIONS = """{
    "name": "mySubscription", "endpoint": "http://my-service", "description": "This is my subscription",
    "trackingEnabled": false, "supportTeam": "My Team", "contact": "my-team@my-company.com",
    "subscriptionPolicy": {"rate": 100, "messageTtl": 3600, "retryClientErrors": false}
}"""


def test_the_guides_request_bodies_are_accepted_verbatim(client: HermesClient) -> None:
    client.create_group("group")
    client.create_topic("group.topic")
    path = "/topics/group.topic/subscriptions"
    for body in (CURRENT_MINIMAL, CURRENT_ALL_OPTIONS, OLDER_MINIMAL, OLDER_ALL_OPTIONS):
        response = client.management.post(path, content=body, headers=JSON)
        assert response.status_code == 201, response.text
        created = client.management.get(f"{path}/mySubscription").json()
        for key, value in json.loads(body).items():
            if key in ("supportTeam",):
                assert created["owner"]["id"] == value
            elif key == "subscriptionPolicy":
                assert value.items() <= created[key].items()
            elif key == "filters":  # defaults (matchingStrategy "all") are filled in
                assert all(f.items() <= c.items() for f, c in zip(value, created[key], strict=True))
            else:
                assert created[key] == value, key
        assert client.management.delete(f"{path}/mySubscription").status_code == 200


def test_defaults_of_a_minimal_subscription(client: HermesClient) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://my-service")
    sub = client.management.get(f"/topics/{topic}/subscriptions/{name}").json()
    assert sub["subscriptionPolicy"] == {
        "rate": 400,
        "messageTtl": 3600,
        "messageBackoff": 100,
        "retryClientErrors": False,
        "requestTimeout": 1000,
        "socketTimeout": 0,
        "sendingDelay": 0,
        "backoffMultiplier": 1.0,
        "backoffMaxIntervalInSec": 600,
    }  # no inflightSize: unset, the consumers' default applies, and Hermes leaves unset fields out
    assert (sub["deliveryType"], sub["mode"], sub["contentType"], sub["trackingMode"]) == (
        "SERIAL",
        "ANYCAST",
        "JSON",
        "trackingOff",
    )
    batch = client.create_subscription(topic, "http://my-service", deliveryType="BATCH")
    policy = client.management.get(f"/topics/{topic}/subscriptions/{batch}").json()["subscriptionPolicy"]
    assert policy == {
        "messageTtl": 60,
        "messageBackoff": 500,
        "retryClientErrors": False,
        "requestTimeout": 30000,
        "batchSize": 100,
        "batchTime": 30000,
        "batchVolume": 64000,
    }


def test_a_partial_put_changes_only_what_it_names(client: HermesClient) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://my-service", subscriptionPolicy={"rate": 50})
    path = f"/topics/{topic}/subscriptions/{name}"
    before = client.management.get(path).json()
    patch = '{"filters": [{"type": "avropath", "path": ".user.name", "matcher": "^abc.*"}]}'
    assert client.management.put(path, content=patch, headers=JSON).status_code == 200
    after = client.management.get(path).json()
    assert after["filters"] == [
        {"type": "avropath", "path": ".user.name", "matcher": "^abc.*", "matchingStrategy": "all"}
    ]
    changing = ("filters", "modifiedAt", "state")  # the state: PENDING until the consumers start it
    assert {k: v for k, v in after.items() if k not in changing} == {
        k: v for k, v in before.items() if k not in changing
    }
    client.management.put(path, json={"subscriptionPolicy": {"inflightSize": 5}})
    policy = client.management.get(path).json()["subscriptionPolicy"]
    assert (policy["rate"], policy["inflightSize"]) == (50, 5)


def test_ordering_by_key_is_set_kept_by_partial_puts_and_refused_for_batch_with_the_field_named(
    client: HermesClient,
) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://my-service")
    path = f"/topics/{topic}/subscriptions/{name}"
    assert "ordering" not in client.management.get(path).json()["subscriptionPolicy"]
    assert client.management.put(path, json={"subscriptionPolicy": {"ordering": "KEY"}}).status_code == 200
    assert client.management.put(path, json={"subscriptionPolicy": {"rate": 50}}).status_code == 200
    assert client.management.get(path).json()["subscriptionPolicy"]["ordering"] == "KEY"
    wrong = client.management.put(path, json={"subscriptionPolicy": {"ordering": "PARTITION"}})
    _error(wrong, 400, "VALIDATION_ERROR")
    assert "subscriptionPolicy.ordering" in wrong.json()["message"] and "KEY" in wrong.json()["message"]
    batch = {"name": "b", "endpoint": "http://x", "deliveryType": "BATCH", "subscriptionPolicy": {"ordering": "KEY"}}
    refused = client.management.post(f"/topics/{topic}/subscriptions", json=batch)
    _error(refused, 400, "VALIDATION_ERROR")
    assert "subscriptionPolicy.ordering" in refused.json()["message"]


def test_endpoint_passwords_are_stored_but_never_shown(client: HermesClient) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://user:t0ps3cret@my-service/path")
    path = f"/topics/{topic}/subscriptions/{name}"
    shown = client.management.get(path).json()
    assert "t0ps3cret" not in json.dumps(shown) and shown["endpoint"] == "http://user:*****@my-service/path"
    client.management.put(path, json={"endpoint": shown["endpoint"], "description": "changed"})
    assert "t0ps3cret" not in client.management.get(path).text
    provider = {
        "name": unique("auth"),
        "tokenEndpoint": "http://auth/token",
        "clientId": "hermes",
        "clientSecret": "abc123",
        "tokenRequestInitialDelay": 1000,
        "tokenRequestMaxDelay": 30000,
        "requestTimeout": 1000,
        "socketTimeout": 500,
    }
    created = client.management.post("/oauth/providers", json=provider)
    assert created.status_code == 201 and created.json()["clientSecret"] == "******"
    assert client.management.get(f"/oauth/providers/{provider['name']}").json()["clientSecret"] == "******"
    assert provider["name"] in client.management.get("/oauth/providers").json()


def _error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code


def test_errors_have_one_shape_and_the_right_status(client: HermesClient) -> None:
    topic = client.create_topic()
    group = topic.rpartition(".")[0]
    _error(client.management.get(f"/topics/{group}.missing"), 404, "TOPIC_NOT_EXISTS")
    _error(client.management.get(f"/topics/{topic}/subscriptions/missing"), 400, "SUBSCRIPTION_NOT_EXISTS")
    _error(client.management.post("/groups", json={"groupName": group}), 400, "GROUP_ALREADY_EXISTS")
    owner = {"source": "Plaintext", "id": "tests"}
    _error(client.management.post("/topics", json={"name": topic, "owner": owner}), 400, "TOPIC_ALREADY_EXISTS")
    _error(client.management.delete(f"/groups/{group}"), 403, "GROUP_NOT_EMPTY")
    name = client.create_subscription(topic, "http://my-service")
    _error(
        client.management.post(
            f"/topics/{topic}/subscriptions", json={"name": name, "endpoint": "http://x", "owner": owner}
        ),
        400,
        "SUBSCRIPTION_ALREADY_EXISTS",
    )
    _error(client.management.delete(f"/topics/{topic}"), 403, "TOPIC_NOT_EMPTY")
    _error(client.management.post("/topics", content="{not json", headers=JSON), 400, "FORMAT_ERROR")
    bad = client.management.post(
        f"/topics/{topic}/subscriptions", json={"name": "s", "endpoint": "http://x", "subscriptionPolicy": {"rate": 0}}
    )
    _error(bad, 400, "VALIDATION_ERROR")
    assert "subscriptionPolicy.rate" in bad.json()["message"]
    _error(
        client.management.put(f"/topics/{topic}/subscriptions/{name}/state", content='"PAUSED"', headers=JSON),
        400,
        "VALIDATION_ERROR",
    )


def test_groups_topics_and_their_kafka_topics(hermes: Any, client: HermesClient) -> None:
    admin = BrokerAdmin(hermes.hermes.connection)
    group = client.create_group()
    topic = client.create_topic(f"{group}.orders", retentionTime={"duration": 2, "retentionUnit": "HOURS"})
    assert admin.topic_exists(topic) and len(admin.partitions(topic)) == 2
    avro_only = client.management.post(
        f"/topics/{topic}/subscriptions",
        json={"name": "a", "endpoint": "http://x", "contentType": "AVRO", "owner": {"id": "tests"}},
    )
    assert avro_only.status_code == 400 and "contentType" in avro_only.json()["message"]
    assert client.management.get("/groups").json().count(group) == 1
    assert client.management.get("/topics", params={"groupName": group}).json() == [topic]
    updated = client.management.put(f"/topics/{topic}", json={"description": "new", "maxMessageSize": 4096})
    assert updated.status_code == 200 and updated.json()["maxMessageSize"] == 4096
    assert client.management.get(f"/topics/{topic}").json()["retentionTime"] == {
        "duration": 2,
        "retentionUnit": "HOURS",
    }
    assert client.management.delete(f"/topics/{topic}").status_code == 200
    wait_until(lambda: not admin.topic_exists(topic), 10)  # Kafka deletes a topic asynchronously
    assert client.management.delete(f"/groups/{group}").status_code == 200
    assert group not in client.management.get("/groups").json()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=12,
)
_FIELDS = [
    "name",
    "endpoint",
    "subscriptionPolicy",
    "filters",
    "headers",
    "deliveryType",
    "mode",
    "owner",
    "contentType",
    "trackingMode",
    "oAuthPolicy",
    "retentionTime",
    "maxMessageSize",
    "groupName",
    "tokenEndpoint",
    "clientId",
    "clientSecret",
    "rate",
    "state",
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    target=st.sampled_from(["/groups", "/topics", "SUBS", "SUB", "STATE", "/oauth/providers", "RETRANSMIT"]),
    body=st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=6) | _JSON,
)
def test_no_input_makes_the_api_fail(client: HermesClient, fuzz_topic: tuple[str, str], target: str, body: Any) -> None:
    topic, sub = fuzz_topic
    path = {
        "SUBS": f"/topics/{topic}/subscriptions",
        "SUB": f"/topics/{topic}/subscriptions/{sub}",
        "STATE": f"/topics/{topic}/subscriptions/{sub}/state",
        "RETRANSMIT": f"/topics/{topic}/subscriptions/{sub}/retransmission",
    }.get(target, target)
    method = client.management.put if target in ("SUB", "STATE") else client.management.post
    response = method(path, content=json.dumps(body), headers=JSON)
    assert response.status_code < 500, response.text
    template = {
        "SUBS": "/topics/{topic}/subscriptions",
        "SUB": "/topics/{topic}/subscriptions/{subscription}",
        "STATE": "/topics/{topic}/subscriptions/{subscription}/state",
        "RETRANSMIT": "/topics/{topic}/subscriptions/{subscription}/retransmission",
    }.get(target, target)
    conforms_to_openapi(template, "put" if target in ("SUB", "STATE") else "post", response)


def test_the_openapi_document_describes_every_route(hermes: Any, client: HermesClient) -> None:
    served = client.management.get("/openapi.json")
    assert served.status_code == 200 and served.json() == json.loads(json.dumps(OPENAPI))
    app = hermes.hermes.servers[Role.MANAGEMENT].app
    routes = {(r.resource.canonical, r.method.lower()) for r in app.router.routes() if r.method != "HEAD"}
    routes = {(path, method) for path, method in routes if not f"{path}/".startswith("/ui/")}  # the console
    documented = {(path, method) for path, operations in OPENAPI["paths"].items() for method in operations}
    assert routes == documented


def test_responses_conform_to_the_openapi_document(client: HermesClient) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://user:pw@my-service/")
    base = f"/topics/{topic}/subscriptions/{name}"
    checks = [
        ("/groups", "get", client.management.get("/groups")),
        ("/topics/{topic}", "get", client.management.get(f"/topics/{topic}")),
        ("/topics/{topic}/metrics", "get", client.management.get(f"/topics/{topic}/metrics")),
        ("/topics/{topic}/subscriptions", "get", client.management.get(f"/topics/{topic}/subscriptions")),
        ("/topics/{topic}/subscriptions/{subscription}", "get", client.management.get(base)),
        ("/topics/{topic}/subscriptions/{subscription}/metrics", "get", client.management.get(base + "/metrics")),
        ("/topics/{topic}/subscriptions/{subscription}/health", "get", client.management.get(base + "/health")),
        (
            "/topics/{topic}/subscriptions/{subscription}/undelivered/last",
            "get",
            client.management.get(base + "/undelivered/last"),
        ),
        (
            "/topics/{topic}/subscriptions/{subscription}/retransmission",
            "put",
            client.management.put(base + "/retransmission", json={"retransmissionDate": "2026-01-01T00:00:00Z"}),
        ),
        ("/unhealthy", "get", client.management.get("/unhealthy")),
        ("/topics/{topic}/schema", "get", client.management.get(f"/topics/{topic}/schema")),
    ]
    for template, method, response in checks:
        conforms_to_openapi(template, method, response)


@pytest.fixture(scope="module")
def fuzz_topic(hermes: Any) -> tuple[str, str]:
    api = HermesClient(hermes.management_url, hermes.frontend_url)
    topic = api.create_topic()
    sub = api.create_subscription(topic, "http://my-service")
    api.close()
    return topic, sub

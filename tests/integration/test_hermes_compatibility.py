"""Hermes' management API, route by route: the shapes, defaults and status codes its clients rely on."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from tests.support.hermes import HermesClient

pytestmark = pytest.mark.integration
JSON = {"Content-Type": "application/json"}
AVRO_SCHEMA = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "__metadata", "type": ["null", {"type": "map", "values": "string"}], "default": None},
    ],
}


def _error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code, response.text


def test_a_topic_has_every_hermes_field_with_hermes_defaults(client: HermesClient) -> None:
    before = time.time()
    topic = client.management.get(f"/topics/{client.create_topic()}").json()
    assert topic["auth"] == {"publishers": [], "enabled": False, "unauthenticatedAccessEnabled": True}
    assert topic["chaos"] == {"mode": "DISABLED", "datacenterPolicies": {}}
    assert (topic["jsonToAvroDryRun"], topic["migratedFromJsonType"], topic["fallbackToRemoteDatacenterEnabled"]) == (
        False,
        False,
        False,
    )
    assert before - 1 <= topic["createdAt"] <= time.time() + 1, "epoch seconds, as Hermes writes an Instant"
    assert "schema" not in topic


def test_a_subscription_has_every_hermes_field_with_hermes_defaults(client: HermesClient) -> None:
    topic = client.create_topic()
    sub = client.management.get(f"/topics/{topic}/subscriptions/{client.create_subscription(topic, 'http://x')}")
    body = sub.json()
    assert body["monitoringDetails"] == {"severity": "NON_IMPORTANT", "reaction": ""}
    assert (body["profilingEnabled"], body["profilingThresholdMs"]) == (False, 0)
    assert body["metricsConfig"] == {"messageProcessing": {"thresholdsMilliseconds": [], "enabled": False}}
    assert "oAuthPolicy" not in body, "Hermes leaves a missing OAuth policy out"
    assert time.time() - 60 <= body["createdAt"] <= time.time() + 1


def test_hermes_fields_are_stored_and_returned(client: HermesClient) -> None:
    topic = client.create_topic(
        auth={"publishers": ["service-a"], "enabled": True, "unauthenticatedAccessEnabled": False},
        chaos={"mode": "GLOBAL", "globalPolicy": {"probability": 5, "delayFrom": 1, "delayTo": 9}},
    )
    shown = client.management.get(f"/topics/{topic}").json()
    assert shown["auth"]["publishers"] == ["service-a"] and shown["chaos"]["globalPolicy"]["delayTo"] == 9
    name = client.create_subscription(
        topic,
        "http://x",
        monitoringDetails={"severity": "CRITICAL", "reaction": "call the team"},
        metricsConfig={"messageProcessing": {"enabled": True, "thresholdsMilliseconds": [10, 100]}},
    )
    sub = client.management.get(f"/topics/{topic}/subscriptions/{name}").json()
    assert sub["monitoringDetails"]["severity"] == "CRITICAL"
    assert sub["metricsConfig"]["messageProcessing"]["thresholdsMilliseconds"] == [10, 100]
    bad = client.management.post(
        f"/topics/{topic}/subscriptions",
        json={"name": "bad", "endpoint": "http://x", "monitoringDetails": {"severity": "URGENT"}},
    )
    _error(bad, 400, "VALIDATION_ERROR")
    assert bad.json()["message"].startswith("monitoringDetails.severity")


def test_unknown_fields_are_accepted_and_named(client: HermesClient, caplog: pytest.LogCaptureFixture) -> None:
    topic = client.create_topic()
    path = f"/topics/{topic}/subscriptions"
    with caplog.at_level(logging.INFO, logger="hermes.management.api.bodies"):
        created = client.management.post(
            path,
            json={
                "name": "misspelt",
                "endpoint": "http://x",
                "subscriptionPolicy": {"rat": 5, "rate": 7, "batchSize": 3},
                "filters": [{"type": "header", "header": "h", "matcher": "x", "pth": "$.a"}],
                "endpointAddressResolverMetadata": {"anything": {"goes": 1}},
                "colour": "blue",
            },
        )
    assert created.status_code == 201, created.text
    ignored = created.headers["Hermes-Ignored-Fields"].split(",")
    assert sorted(ignored) == ["colour", "filters[0].pth", "subscriptionPolicy.batchSize", "subscriptionPolicy.rat"]
    assert "subscriptionPolicy.rat" in caplog.text
    assert created.json()["subscriptionPolicy"]["rate"] == 7
    updated = client.management.put(f"{path}/misspelt", json={"subscriptionPolicy": {"inflightSiz": 1}})
    assert updated.status_code == 200 and updated.headers["Hermes-Ignored-Fields"] == "subscriptionPolicy.inflightSiz"
    clean = client.management.put(f"{path}/misspelt", json={"description": "fine"})
    assert "Hermes-Ignored-Fields" not in clean.headers
    topic_update = client.management.put(f"/topics/{topic}", json={"retentionTime": {"duraton": 3}})
    assert topic_update.headers["Hermes-Ignored-Fields"] == "retentionTime.duraton"


def test_groups_can_be_updated_but_not_renamed(client: HermesClient) -> None:
    group = client.create_group()
    assert client.management.put(f"/groups/{group}", json={"groupName": group}).status_code == 204
    _error(client.management.put(f"/groups/{group}", json={"groupName": "other"}), 400, "VALIDATION_ERROR")
    _error(client.management.put("/groups/nosuchgroup", json={}), 404, "GROUP_NOT_EXISTS")


def test_avro_schemas_as_hermes_serves_them(client: HermesClient) -> None:
    json_topic = client.create_topic()
    assert client.management.get(f"/topics/{json_topic}/schema").status_code == 204
    topic = client.create_topic(contentType="AVRO", schema=AVRO_SCHEMA)
    shown = client.management.get(f"/topics/{topic}").json()
    assert isinstance(shown["schema"], str) and '"User"' in shown["schema"], "TopicWithSchema: a string"
    assert client.management.get(f"/topics/{topic}/schema/ids/1").status_code == 200
    assert client.management.get(f"/topics/{topic}/schema/versions/7").status_code == 204
    changed = {**AVRO_SCHEMA, "doc": "second"}
    assert client.management.put(f"/topics/{topic}", json={"schema": changed}).status_code == 200
    assert client.management.get(f"/topics/{topic}/schema/versions").json() == [1, 2]
    client.management.put(f"/topics/{topic}", json={"schema": changed, "description": "same schema"})
    assert client.management.get(f"/topics/{topic}/schema/versions").json() == [1, 2], "an unchanged schema"
    _error(client.management.delete(f"/topics/{topic}/schema"), 406, "OPERATION_DISABLED")


def test_tracked_lists(client: HermesClient) -> None:
    group = client.create_group()
    tracked = client.create_topic(f"{group}.tracked", trackingEnabled=True)
    client.create_topic(f"{group}.untracked")
    assert client.management.get("/topics", params={"groupName": group, "tracked": "true"}).json() == [tracked]
    sub = client.create_subscription(tracked, "http://x", trackingMode="trackingAll")
    client.create_subscription(tracked, "http://x")
    assert client.management.get(f"/topics/{tracked}/subscriptions", params={"tracked": "true"}).json() == [sub]

"""Hermes' management API, route by route: the shapes, defaults and status codes its clients rely on."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from hermes.broker.admin import BrokerAdmin
from hermes.broker.embedded import free_port
from tests.conftest import wait_until
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
                "owner": {"source": "Plaintext", "id": "tests"},
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
    odd = client.management.put(f"/topics/{topic}", json={"we,ird\nname": 1})
    assert odd.headers["Hermes-Ignored-Fields"] == "we%2Cird%0Aname", "a client's field name cannot break the header"


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


def test_queries_as_the_console_sends_them(client: HermesClient) -> None:
    group = client.create_group()
    topic = client.create_topic(f"{group}.searchedTopic", owner={"source": "Plaintext", "id": "Query Team"})
    other = client.create_topic(f"{group}.otherTopic")
    sub = client.create_subscription(topic, "http://user:secret@searched-service/x", name="searchedSub")
    like = {"query": {"name": {"like": "(?i).*SEARCHEDTOPIC.*"}}}
    found = client.management.post("/query/topics", json=like).json()
    assert [t["name"] for t in found] == [topic] and found[0]["owner"]["id"] == "Query Team"
    by_owner = {"query": {"owner.id": {"like": "(?i).*query team.*"}}}
    assert [t["name"] for t in client.management.post("/query/topics", json=by_owner).json()] == [topic]
    subs = client.management.post(
        "/query/subscriptions", json={"query": {"endpoint": {"like": ".*searched-service.*"}}}
    )
    assert [s["name"] for s in subs.json()] == [sub] and "secret" not in subs.text
    assert client.management.post("/query/groups", json={"query": {"groupName": group}}).json() == [
        {"groupName": group}
    ]
    names = client.management.post("/topics/query", params={"groupName": group}, json={"query": {}})
    assert sorted(names.json()) == sorted([topic, other])
    in_topic = client.management.post(f"/topics/{topic}/subscriptions/query", json={"query": {"name": sub}})
    assert in_topic.json() == [sub]
    _error(client.management.post("/query/topics", json={"query": {"name": {"like": "("}}}), 400, "INVALID_QUERY")
    _error(client.management.post("/query/topics", json={"name": "x"}), 400, "INVALID_QUERY")


def test_search_and_stats(client: HermesClient) -> None:
    group = client.create_group()
    topic = client.create_topic(f"{group}.findMe", contentType="AVRO", schema=AVRO_SCHEMA, ack="ALL")
    client.create_subscription(topic, "http://find-me-service/", name="alsoFindMe")
    results = client.management.get("/search/query", params={"q": "FINDME"}).json()
    assert results["totalCount"] == 2
    topic_item, sub_item = results["results"]
    assert topic_item == {"type": "TOPIC", "name": topic, "topic": {"groupName": group, "owner": {"id": "tests"}}}
    assert sub_item["type"] == "SUBSCRIPTION" and sub_item["name"] == "alsoFindMe"
    assert sub_item["subscription"]["topic"] == {"name": "findMe", "qualifiedName": topic, "groupName": group}
    assert client.management.get("/search/query").json() == {"results": [], "totalCount": 0}
    stats = client.management.get("/stats").json()
    assert stats["topicStats"]["avroTopicCount"] >= 1 and stats["topicStats"]["ackAllTopicCount"] >= 1
    assert stats["subscriptionStats"]["subscriptionCount"] >= 1


def test_owners_and_roles(client: HermesClient) -> None:
    owner = {"source": "Plaintext", "id": "Owners Team"}
    topic = client.create_topic(owner=owner)
    sub = client.create_subscription(topic, "http://x", owner=owner)
    assert client.management.get("/owners/sources").json() == [
        {"name": "Plaintext", "autocomplete": False, "deprecated": False}
    ]
    search = client.management.get("/owners/sources/Plaintext", params={"search": "owners t"})
    _error(search, 400, "OWNER_SOURCE_DOESNT_SUPPORT_AUTOCOMPLETE")
    assert client.management.get("/owners/sources/Plaintext/Owners Team").json()["name"] == "Owners Team"
    assert [t["name"] for t in client.management.get("/topics/owner/Plaintext/Owners Team").json()] == [topic]
    assert [s["name"] for s in client.management.get("/subscriptions/owner/Plaintext/Owners Team").json()] == [sub]
    _error(client.management.get("/owners/sources/Crowd/x"), 404, "OWNER_SOURCE_NOT_FOUND")
    assert client.management.get("/roles").json() == ["admin", "any"]
    assert "topicOwner" in client.management.get(f"/roles/topics/{topic}").json()
    assert "subscriptionOwner" in client.management.get(f"/roles/topics/{topic}/subscriptions/{sub}").json()


def test_a_retransmission_dry_run_moves_nothing(hermes: Any, client: HermesClient) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://127.0.0.1:9/", state="SUSPENDED")
    for i in range(3):
        assert client.publish(topic, f'{{"n": {i}}}').status_code in (201, 202)
    admin = BrokerAdmin(hermes.hermes.connection)
    group = f"hermes_{topic}_{name}"
    before = admin.committed_offsets(group, topic)
    path = f"/topics/{topic}/subscriptions/{name}/retransmission"
    dry = client.management.put(path, params={"dryRun": "true"}, json={"retransmissionDate": "2020-01-01T00:00:00Z"})
    assert dry.status_code == 200, dry.text
    assert [p["offset"] for p in dry.json()["partitionOffsetListPerBrokerName"]["primary"]] == [0, 0]
    assert admin.committed_offsets(group, topic) == before, "a dry run computes the offsets, nothing more"
    assert hermes.hermes.repository.get_document("retransmission", f"{topic}${name}") is None
    client.management.put(path, json={"retransmissionDate": "2020-01-01T00:00:00Z"})
    assert admin.committed_offsets(group, topic) == {0: 0, 1: 0}


def test_metrics_in_hermes_formats(client: HermesClient) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, "http://127.0.0.1:9/", state="SUSPENDED")
    base = f"/topics/{topic}/subscriptions/{name}"
    metrics = client.management.get(base + "/metrics").json()
    for field in ("timeouts", "otherErrors", "codes2xx", "codes4xx", "codes5xx", "retries", "rate", "batchRate"):
        assert metrics[field] == "0.0", field
    assert (metrics["lag"], metrics["state"], metrics["volume"], metrics["throughput"]) == (
        "0",
        "SUSPENDED",
        0,
        "unavailable",
    )
    assert client.management.get(base + "/metrics/persistent").json() == {"delivered": 0, "discarded": 0, "volume": 0}
    topic_metrics = client.management.get(f"/topics/{topic}/metrics").json()
    assert topic_metrics["rate"] == "0.0" and topic_metrics["subscriptions"] == 1
    by_query = client.management.post(
        "/query/subscriptions/metrics", json={"query": {"topicName": topic, "lag": {"lt": 1}}}
    ).json()
    assert [(m["name"], m["lag"]) for m in by_query] == [(name, "0")]
    topics = client.management.post("/query/topics/metrics", json={"query": {"name": topic}}).json()
    assert topics == [
        {
            **{
                k: topic_metrics[k]
                for k in ("published", "rate", "deliveryRate", "subscriptions", "throughput", "volume")
            },
            "name": topic,
        }
    ]


def test_consumer_groups_from_kafka(hermes: Any, client: HermesClient, subscriber: Any) -> None:
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url)
    hermes.consumer(topic, name)
    path = f"/topics/{topic}/subscriptions/{name}/consumer-groups"

    def assigned() -> list[Any]:
        [group] = client.management.get(path).json()
        return [p for m in group["members"] for p in m["partitions"]]

    wait_until(lambda: len(assigned()) == 2, 20)
    [group] = client.management.get(path).json()
    assert group["groupId"] == f"hermes_{topic}_{name}" and group["state"] == "Stable"
    assert {p["partition"] for p in assigned()} == {0, 1} and all(p["topic"] == topic for p in assigned())


def test_unhealthy_respects_severity_and_filters(client: HermesClient) -> None:
    topic = client.create_topic()
    dead = f"http://127.0.0.1:{free_port()}/"
    policy = {"messageBackoff": 100, "messageTtl": 60}
    quiet = client.create_subscription(topic, dead, subscriptionPolicy=policy)
    loud = client.create_subscription(
        topic, dead, subscriptionPolicy=policy, monitoringDetails={"severity": "CRITICAL", "reaction": "page"}
    )
    client.publish(topic, '{"n": 1}')

    def unhealthy(**params: str) -> list[Any]:
        return [u for u in client.management.get("/unhealthy", params=params).json() if u["topicName"] == topic]

    wait_until(lambda: len(unhealthy(respectMonitoringSeverity="false")) == 2, 20)
    [only] = unhealthy()
    assert (only["name"], only["severity"], only["problems"][0]["code"]) == (loud, "CRITICAL", "UNREACHABLE")
    assert unhealthy(respectMonitoringSeverity="false", subscriptionNames=quiet)[0]["name"] == quiet
    assert unhealthy(ownerSourceName="Plaintext", ownerId="nobody") == []
    assert unhealthy(ownerId="nobody") == unhealthy(ownerSourceName="Crowd", ownerId="nobody") == [only]
    text = client.management.get("/unhealthy/", params={"qualifiedTopicNames": topic}, headers={"Accept": "text/plain"})
    assert text.headers["Content-Type"].startswith("text/plain") and text.text.startswith(f"{loud} - ")


def test_oauth_provider_error_codes(client: HermesClient) -> None:
    provider = {"name": "dup", "tokenEndpoint": "http://auth/token", "clientId": "c", "clientSecret": "s"}
    name = f"p{time.time_ns()}"
    assert client.management.post("/oauth/providers", json={**provider, "name": name}).status_code == 201
    _error(
        client.management.post("/oauth/providers", json={**provider, "name": name}),
        400,
        "OAUTH_PROVIDER_ALREADY_EXISTS",
    )
    _error(client.management.get("/oauth/providers/nosuchprovider"), 404, "OAUTH_PROVIDER_NOT_EXISTS")
    _error(client.management.delete(f"/topics/{client.create_topic()}/schema"), 406, "OPERATION_DISABLED")

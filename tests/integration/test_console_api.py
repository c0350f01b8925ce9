"""The Hermes console's API calls (hermes-console ``src/api/hermes-client``), replayed against a running Hermes
with the request bodies its forms send: every one gets a 2xx and the fields the console reads (its
``src/api/*.ts`` interfaces)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import httpx
import pytest

from tests.conftest import wait_until
from tests.support.hermes import HermesClient, unique
from tests.support.subscriber import SubscriberServer

pytestmark = pytest.mark.integration
JSON = {"Content-Type": "application/json", "Accept": "application/json"}

# The fields each console interface reads, by the name of the interface.
READS = {
    "AppConfiguration": {
        "console",
        "dashboard",
        "metrics",
        "auth",
        "owner",
        "topic",
        "subscription",
        "consistency",
        "group",
        "costs",
    },
    "TopicWithSchema": {
        "name",
        "description",
        "owner",
        "retentionTime",
        "jsonToAvroDryRun",
        "ack",
        "trackingEnabled",
        "migratedFromJsonType",
        "contentType",
        "maxMessageSize",
        "auth",
        "subscribingRestricted",
        "offlineStorage",
        "createdAt",
        "modifiedAt",
        "fallbackToRemoteDatacenterEnabled",
    },
    "TopicMetrics": {"published", "volume", "rate", "deliveryRate", "subscriptions", "throughput"},
    "Subscription": {
        "topicName",
        "name",
        "endpoint",
        "state",
        "description",
        "subscriptionPolicy",
        "trackingEnabled",
        "trackingMode",
        "owner",
        "monitoringDetails",
        "contentType",
        "deliveryType",
        "filters",
        "mode",
        "headers",
        "endpointAddressResolverMetadata",
        "http2Enabled",
        "subscriptionIdentityHeadersEnabled",
        "autoDeleteWithTopicEnabled",
        "createdAt",
        "modifiedAt",
    },
    "SubscriptionMetrics": {
        "delivered",
        "discarded",
        "volume",
        "timeouts",
        "otherErrors",
        "codes2xx",
        "codes4xx",
        "codes5xx",
        "retries",
        "lag",
        "rate",
        "throughput",
        "batchRate",
    },
    "SubscriptionHealth": {"status", "problems"},
    "Stats": {"topicStats", "subscriptionStats"},
    "SearchResults": {"totalCount", "results"},
    "ConstraintsConfig": {"topicConstraints", "subscriptionConstraints"},
    "OwnerSource": {"name", "autocomplete", "deprecated"},
    "Owner": {"id", "name"},
    "ConsumerGroup": {"clusterName", "groupId", "state", "members"},
    "DatacenterReadiness": {"datacenter", "status"},
    "MessageFiltersVerificationResponse": {"status"},
}


def _reads(response: httpx.Response, interface: str) -> Any:
    assert response.is_success, f"{response.request.method} {response.request.url}: {response.text}"
    body = response.json()
    for item in body if isinstance(body, list) else [body]:
        assert READS[interface] <= set(item), (interface, READS[interface] - set(item))
    return body


def test_the_console_calls_get_what_the_console_reads(client: HermesClient, subscriber: SubscriberServer) -> None:
    api = client.management
    group = unique("console")
    # group form, topic form (parseTopicForm), subscription form (parseFormToRequestBody)
    assert api.post("/groups", json={"groupName": group}, headers=JSON).is_success
    topic_form = {
        "name": f"{group}.orders",
        "description": "orders",
        "owner": {"source": "Plaintext", "id": "Console Team"},
        "auth": {"publishers": [], "enabled": False, "unauthenticatedAccessEnabled": True},
        "ack": "LEADER",
        "retentionTime": {"duration": 1, "retentionUnit": "DAYS"},
        "trackingEnabled": False,
        "offlineStorage": {"enabled": False, "retentionTime": {"duration": 60, "infinite": False}},
        "subscribingRestricted": False,
        "maxMessageSize": 10240,
        "contentType": "JSON",
    }
    assert api.post("/topics", json=topic_form, headers=JSON).is_success
    topic = topic_form["name"]
    subscription_form = {
        "name": "printer",
        "topicName": topic,
        "owner": {"source": "Plaintext", "id": "Console Team"},
        "contentType": "JSON",
        "deliveryType": "SERIAL",
        "description": "prints",
        "endpoint": subscriber.url,
        "filters": [{"type": "jsonpath", "path": "$.n", "matcher": ".*", "matchingStrategy": "all"}],
        "headers": [{"name": "X-Console", "value": "1"}],
        "http2Enabled": False,
        "mode": "ANYCAST",
        "monitoringDetails": {"reaction": "", "severity": "NON_IMPORTANT"},
        "subscriptionPolicy": {
            "backoffMaxIntervalInSec": 600,
            "backoffMultiplier": 1,
            "messageBackoff": 100,
            "messageTtl": 3600,
            "inflightSize": 100,
            "rate": 400,
            "requestTimeout": 1000,
            "sendingDelay": 0,
            "retryClientErrors": False,
        },
        "trackingMode": "trackingOff",
        "endpointAddressResolverMetadata": {},
        "subscriptionIdentityHeadersEnabled": False,
        "autoDeleteWithTopicEnabled": False,
    }
    created = api.post(f"/topics/{topic}/subscriptions", json=subscription_form, headers=JSON)
    assert created.is_success and "Hermes-Ignored-Fields" not in created.headers, created.headers
    sub = f"/topics/{topic}/subscriptions/printer"
    assert client.publish(topic, '{"n": 1}').is_success
    subscriber.wait_for(1, timeout=20)

    config = _reads(api.get("/console", headers={"Accept": "application/json"}), "AppConfiguration")
    assert config["owner"]["sources"][0]["name"] == "Plaintext" and not config["auth"]["oauth"]["enabled"]
    _reads(api.get(f"/topics/{topic}"), "TopicWithSchema")
    _reads(api.get(f"/topics/{topic}/metrics"), "TopicMetrics")
    assert api.get(f"/topics/{topic}/subscriptions").json() == ["printer"]
    shown = _reads(api.get(sub), "Subscription")
    _reads(api.get(sub + "/metrics"), "SubscriptionMetrics")
    _reads(api.get(sub + "/health"), "SubscriptionHealth")
    assert api.get(sub + "/undelivered").is_success
    assert api.get(sub + "/undelivered/last").status_code == 404  # the console shows "none" on a 404
    wait_until(lambda: bool(api.get(sub + "/consumer-groups").json()[0]["members"]), 20)
    _reads(api.get(sub + "/consumer-groups"), "ConsumerGroup")
    assert api.get(f"/topics/{topic}/preview").is_success
    assert api.get(f"/topics/{topic}/clients").json() == ["Console Team"]
    assert api.get(f"/tracking-urls/topics/{topic}").json() == []
    assert api.get(f"/tracking-urls/topics/{topic}/subscriptions/printer").json() == []
    for path in ("/roles", f"/roles/topics/{topic}", f"/roles/topics/{topic}/subscriptions/printer"):
        assert "admin" in api.get(path).json()
    assert not _reads(api.get("/owners/sources"), "OwnerSource")[0]["autocomplete"]  # the console shows a text box
    _reads(api.get("/owners/sources/Plaintext/Console Team"), "Owner")
    _reads(api.get("/stats"), "Stats")
    _reads(api.get("/search/query", params={"q": "orders"}), "SearchResults")
    # case-insensitive as the console asks, and matching this test's topic alone, whatever else the broker holds
    like = {"query": {"name": {"like": f"(?i).*{topic.upper()}.*"}}}
    assert [t["name"] for t in _reads(api.post("/query/topics", json=like, headers=JSON), "TopicWithSchema")] == [topic]
    assert _reads(api.post("/query/subscriptions", json={"query": {"name": "printer"}}), "Subscription")
    _reads(api.get("/workload-constraints"), "ConstraintsConfig")
    assert isinstance(api.get("/inactive-topics").json(), list)
    _reads(api.get("/readiness/datacenters"), "DatacenterReadiness")
    assert group in api.get("/consistency/groups").json()
    assert api.get("/consistency/inconsistencies/groups", params={"groupNames": group}).json() == []
    assert isinstance(api.get("/consistency/inconsistencies/topics").json(), list)
    assert topic in api.get("/topics").json() and group in api.get("/groups").json()
    assert api.get(f"/offline-retransmission/topics/{topic}/tasks/").json() == []
    message = base64.b64encode(b'{"n": 1}').decode()
    verified = api.post(f"/filters/{topic}", json={"message": message, "filters": subscription_form["filters"]})
    assert _reads(verified, "MessageFiltersVerificationResponse")["status"] == "MATCHED"

    # the console's changes: edit (the masked endpoint left out), suspend, activate, retransmit, constraints,
    # readiness, sync, delete
    edit = {**subscription_form, "description": "edited"}
    del edit["endpoint"]
    assert api.put(sub, json=edit, headers=JSON).is_success
    assert api.get(sub).json()["endpoint"] == shown["endpoint"]
    for state in ("SUSPENDED", "ACTIVE"):  # axios sends the state JSON-encoded: "SUSPENDED", quotes included
        assert api.put(sub + "/state", content=f'"{state}"', headers=JSON).is_success
    retransmitted = api.put(sub + "/retransmission", json={"retransmissionDate": "2026-01-01T00:00:00.000Z"})
    assert retransmitted.is_success
    topic_edit = {**topic_form, "description": "edited"}
    assert api.put(f"/topics/{topic}", json=topic_edit, headers=JSON).is_success
    constraint = {"topicName": topic, "constraints": {"consumersNumber": 2, "reason": "console"}}
    assert api.put("/workload-constraints/topic", json=constraint).is_success
    assert api.delete(f"/workload-constraints/topic/{topic}").is_success
    sub_constraint = {"subscriptionName": f"{topic}$printer", "constraints": {"consumersNumber": 1, "reason": ""}}
    assert api.put("/workload-constraints/subscription", json=sub_constraint).is_success
    assert api.delete(f"/workload-constraints/subscription/{topic}/printer").is_success
    assert api.post("/readiness/datacenters/primary", json={"isReady": True}).is_success
    assert api.post(f"/consistency/sync/groups/{group}", params={"primaryDatacenter": "primary"}).is_success
    assert api.post(f"/consistency/sync/topics/{topic}", params={"primaryDatacenter": "primary"}).is_success
    sync_sub = f"/consistency/sync/topics/{topic}/subscriptions/printer"
    assert api.post(sync_sub, params={"primaryDatacenter": "primary"}).is_success
    assert api.delete(sub).is_success
    assert api.delete(f"/topics/{topic}").is_success
    assert api.delete(f"/groups/{group}").is_success


def _refused(response: httpx.Response, field: str) -> None:
    assert response.status_code == 400, response.text
    assert response.json()["message"].startswith(field), response.text


def test_the_console_forms_as_hermes_takes_them(client: HermesClient) -> None:
    api = client.management
    # an owner typed in nowhere: the form sends an empty id
    nobody = {"source": "Plaintext", "id": ""}
    _refused(api.post("/topics", json={"name": f"{client.create_group()}.t", "owner": nobody}), "owner.id")
    topic = client.create_topic(offlineStorage={"enabled": True})
    _refused(api.put(f"/topics/{topic}", json={"owner": nobody}), "owner.id")
    _refused(api.put(f"/topics/{topic}", json={"owner": None}), "owner")
    sub = {"name": "s", "endpoint": "http://localhost:1/", "owner": nobody}
    _refused(api.post(f"/topics/{topic}/subscriptions", json=sub), "owner.id")
    _refused(api.post(f"/topics/{topic}/subscriptions", json={**sub, "owner": None, "supportTeam": " "}), "supportTeam")
    del sub["owner"]  # no owner at all: as Hermes, whose owner is @NotNull
    _refused(api.post(f"/topics/{topic}/subscriptions", json=sub), "owner")
    _refused(api.post("/topics", json={"name": f"{client.create_group()}.t"}), "owner")
    # counts typed into text fields arrive as strings, as Jackson takes them for integer fields
    typed = {"topicName": topic, "constraints": {"consumersNumber": "2", "reason": "console"}}
    assert api.put("/workload-constraints/topic", json=typed).is_success
    assert api.get("/workload-constraints").json()["topicConstraints"][topic]["consumersNumber"] == 2
    for text in ("2.5", "", " 2", "abc", "0"):
        bad = {"topicName": topic, "constraints": {"consumersNumber": text}}
        _refused(api.put("/workload-constraints/topic", json=bad), "constraints.consumersNumber")
    policy = {"rate": "40", "messageTtl": "60"}
    sub = {"name": "s", "endpoint": "http://localhost:1/", "owner": {"id": "Team"}, "subscriptionPolicy": policy}
    created = api.post(f"/topics/{topic}/subscriptions", json=sub)
    assert created.status_code == 201 and created.json()["subscriptionPolicy"]["rate"] == 40, created.text
    _refused(
        api.put(f"/topics/{topic}/subscriptions/s", json={"subscriptionPolicy": {"rate": "4e1"}}),
        "subscriptionPolicy.rate",
    )
    # offline retransmission, as the console spells its kind
    task = {
        "type": "topic",
        "sourceTopic": topic,
        "targetTopic": client.create_topic(),
        "startTimestamp": "2026-01-01T00:00:00.000Z",
        "endTimestamp": "2026-01-01T01:00:00.000Z",
    }
    assert api.post("/offline-retransmission/tasks", json=task).status_code == 201
    _refused(api.post("/offline-retransmission/tasks", json={**task, "type": "view"}), "type")
    # the new subscription form warns only above the default request timeout
    config = api.get("/console").json()["subscription"]
    assert config["requestTimeoutWarningThreshold"] > config["defaults"]["subscriptionPolicy"]["requestTimeout"]


def test_an_avro_preview_carries_the_message_id_and_time(client: HermesClient) -> None:
    schema = {
        "type": "record",
        "name": "User",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "__metadata", "type": ["null", {"type": "map", "values": "string"}], "default": None},
        ],
    }
    topic = client.create_topic(contentType="AVRO", schema=json.dumps(schema))
    published = client.publish(topic, '{"name": "Ann"}')
    assert published.status_code == 201, published.text
    wait_until(lambda: bool(client.management.get(f"/topics/{topic}/preview").json()), 20)
    [shown] = client.management.get(f"/topics/{topic}/preview").json()
    metadata = json.loads(shown["content"])["__metadata"]
    assert metadata["messageId"] == published.headers["Hermes-Message-Id"]
    assert abs(int(metadata["timestamp"]) / 1000 - time.time()) < 600

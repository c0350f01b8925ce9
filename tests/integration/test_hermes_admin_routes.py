"""Hermes' routes for running an installation, against a running Hermes: filter verification, preview,
clients, the absent integrations, mode, readiness, workload constraints, inactive topics, consistency."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from hermes.broker.admin import BrokerAdmin
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, unique
from tests.support.openapi import conforms_to_openapi

pytestmark = pytest.mark.integration

INACTIVITY_S = 3.0  # /inactive-topics lists a topic whose newest message is older than this
WHITELISTED = f"{unique('g')}.idle"


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"inactive_topics_threshold": INACTIVITY_S, "inactive_topics_whitelist": f"other.topic,{WHITELISTED}"}


def _error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["code"] == code, response.text


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_filters_are_verified_as_consumers_apply_them(client: HermesClient) -> None:
    topic = client.create_topic()
    path = f"/filters/{topic}"
    jsonpath = [{"type": "jsonpath", "path": "$.user.name", "matcher": "^abc.*"}]
    matched = client.management.post(path, json={"filters": jsonpath, "message": _b64('{"user": {"name": "abcd"}}')})
    assert matched.status_code == 200 and matched.json() == {"status": "MATCHED"}
    conforms_to_openapi("/filters/{topic}", "post", matched)
    other = client.management.post(path, json={"filters": jsonpath, "message": _b64('{"user": {"name": "xyz"}}')})
    assert other.json() == {"status": "NOT_MATCHED"}
    header = [{"type": "header", "header": "X", "matcher": "1"}]
    assert client.management.post(path, json={"filters": header, "message": _b64("{}")}).json()["status"] == (
        "NOT_MATCHED"
    )
    bad_filter = client.management.post(path, json={"filters": [{"type": "xpath"}], "message": _b64("{}")})
    _error(bad_filter, 400, "VALIDATION_ERROR")
    assert bad_filter.json()["message"].startswith("filters[0].type")
    _error(client.management.post(path, json={"filters": [], "message": "not base64!"}), 400, "VALIDATION_ERROR")
    avro = client.create_topic(
        contentType="AVRO",
        schema={"type": "record", "name": "R", "fields": [{"name": "name", "type": "string"}]},
    )
    avropath = [{"type": "avropath", "path": ".name", "matcher": "a.*"}]
    ok = client.management.post(f"/filters/{avro}", json={"filters": avropath, "message": _b64('{"name": "ab"}')})
    assert ok.json() == {"status": "MATCHED"}
    wrong = client.management.post(f"/filters/{avro}", json={"filters": avropath, "message": _b64('{"nom": 1}')})
    assert wrong.json()["status"] == "ERROR" and wrong.json()["errorMessage"]


def test_preview_of_the_newest_messages(client: HermesClient) -> None:
    topic = client.create_topic(maxMessageSize=64 * 1024)
    assert client.management.get(f"/topics/{topic}/preview").json() == []
    for i in range(5):
        assert client.publish(topic, f'{{"n": {i}}}').status_code in (201, 202)
    big = '{"big": "' + "x" * 20_000 + '"}'
    assert client.publish(topic, big).status_code in (201, 202)

    def previews() -> list[Any]:
        response = client.management.get(f"/topics/{topic}/preview")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    wait_until(lambda: len(previews()) == 3 and previews()[-1]["truncated"], 20)
    shown = previews()
    assert [p["truncated"] for p in shown] == [False, False, True]
    assert len(shown[-1]["content"].encode()) == 10 * 1024, "cut to Hermes' 10 KiB"
    raw = client.management.get(f"/topics/{topic}/preview/0")
    assert raw.headers["Content-Type"] == "application/octet-stream" and raw.content.decode() == shown[0]["content"]
    _error(client.management.get(f"/topics/{topic}/preview/7"), 404, "NOT_FOUND")
    one = client.management.get(f"/topics/{topic}/preview/cluster/primary/partition/0/offset/0")
    if one.status_code == 404:  # partition 0 may hold no message; partition 1 then holds offset 0
        one = client.management.get(f"/topics/{topic}/preview/cluster/primary/partition/1/offset/0")
    # offset 0 of either partition: a small message, or the big one when it went alone to partition 0
    assert one.status_code == 200 and ('"n"' in one.json() or one.json().startswith('{"big": "x'))
    _error(client.management.get(f"/topics/{topic}/preview/cluster/other/partition/0/offset/0"), 404, "NOT_FOUND")
    _error(
        client.management.get(f"/topics/{topic}/preview/cluster/primary/partition/9/offset/0"), 400, "VALIDATION_ERROR"
    )


def test_clients_and_absent_integrations(client: HermesClient) -> None:
    topic = client.create_topic()
    client.create_subscription(topic, "http://x", owner={"source": "Plaintext", "id": "Team A"})
    client.create_subscription(topic, "http://x", owner={"source": "Plaintext", "id": "Team A"})
    client.create_subscription(topic, "http://x", owner={"source": "Plaintext", "id": "Team B"})
    assert sorted(client.management.get(f"/topics/{topic}/clients").json()) == ["Team A", "Team B"]
    _error(client.management.get(f"/topics/{topic}/offline-clients-source"), 404, "IMPLEMENTATION_ABSENT")
    _error(client.management.get(f"/dashboards/topics/{topic}"), 404, "IMPLEMENTATION_ABSENT")
    assert client.management.get(f"/tracking-urls/topics/{topic}").json() == []
    assert client.management.get(f"/tracking-urls/topics/{topic}/subscriptions/s").json() == []


def test_read_only_mode_refuses_changes(client: HermesClient) -> None:
    assert client.management.get("/mode").text == "readWrite"
    _error(client.management.post("/mode", params={"mode": "sleepy"}), 400, "VALIDATION_ERROR")
    assert client.management.post("/mode", params={"mode": "readOnly"}).status_code == 200
    try:
        assert client.management.get("/mode").text == "readOnlyAdmin", "set by hand, as Hermes names it"
        refused = client.management.post("/groups", json={"groupName": unique("g")})
        _error(refused, 503, "OTHER")
        assert client.management.get("/groups").status_code == 200
        assert client.management.post("/query/groups", json={"query": {}}).status_code == 200
    finally:
        assert client.management.post("/mode", params={"mode": "readWrite"}).status_code == 200
    client.create_group()


def test_readiness_of_the_one_datacenter(client: HermesClient) -> None:
    assert client.management.get("/readiness/datacenters").json() == [{"datacenter": "primary", "status": "READY"}]
    assert client.management.post("/readiness/datacenters/primary", json={"isReady": False}).status_code == 202
    assert client.management.get("/readiness/datacenters").json()[0]["status"] == "NOT_READY"
    assert client.management.post("/readiness/datacenters/primary", json={"isReady": True}).status_code == 202
    _error(client.management.post("/readiness/datacenters/dc2", json={"isReady": True}), 404, "NOT_FOUND")
    _error(client.management.post("/readiness/datacenters/primary", json={"isReady": "yes"}), 400, "VALIDATION_ERROR")


def test_workload_constraints(client: HermesClient) -> None:
    topic = client.create_topic()
    body = {"topicName": topic, "constraints": {"consumersNumber": 3, "reason": "busy"}}
    assert client.management.put("/workload-constraints/topic", json=body).status_code == 201
    assert client.management.put("/workload-constraints/topic", json=body).status_code == 200
    sub = {"subscriptionName": f"{topic}$s", "constraints": {"consumersNumber": 2}}
    assert client.management.put("/workload-constraints/subscription", json=sub).status_code == 201
    constraints = client.management.get("/workload-constraints").json()
    assert constraints["topicConstraints"][topic] == {"consumersNumber": 3, "reason": "busy"}
    assert constraints["subscriptionConstraints"][f"{topic}$s"] == {"consumersNumber": 2, "reason": ""}
    bad = client.management.put("/workload-constraints/topic", json={"topicName": topic, "constraints": {}})
    _error(bad, 400, "VALIDATION_ERROR")
    assert bad.json()["message"].startswith("constraints.consumersNumber")
    assert client.management.delete(f"/workload-constraints/topic/{topic}").status_code == 200
    _error(client.management.delete(f"/workload-constraints/topic/{topic}"), 400, "TOPIC_CONSTRAINTS_DO_NOT_EXIST")
    assert client.management.delete(f"/workload-constraints/subscription/{topic}/s").status_code == 200
    _error(
        client.management.delete(f"/workload-constraints/subscription/{topic}/s"),
        400,
        "SUBSCRIPTION_CONSTRAINTS_DO_NOT_EXIST",
    )


def test_inactive_topics_are_those_without_a_message_for_the_threshold(client: HermesClient) -> None:
    idle, empty = client.create_topic(), client.create_topic()
    client.create_group(WHITELISTED.partition(".")[0])
    client.create_topic(WHITELISTED)
    published = time.time() * 1000
    for topic in (idle, WHITELISTED):
        assert client.publish(topic, "{}").status_code in (201, 202)

    def inactive() -> dict[str, Any]:
        response = client.management.get("/inactive-topics")
        assert response.status_code == 200
        return {t["topic"]: t for t in response.json()}

    assert not {idle, WHITELISTED} & set(inactive())  # published a moment ago
    wait_until(lambda: {idle, WHITELISTED} <= set(inactive()), timeout=INACTIVITY_S + 20, interval=0.2)
    recent = client.create_topic()
    client.publish(recent, "{}")
    found = inactive()
    assert recent not in found and empty not in found  # a message just now; never a message
    assert found[idle]["notificationTsMs"] == [] and found[idle]["whitelisted"] is False
    assert found[WHITELISTED]["whitelisted"] is True
    assert published - 1000 <= found[idle]["lastPublishedTsMs"] <= published + 5000
    conforms_to_openapi("/inactive-topics", "get", client.management.get("/inactive-topics"))


def test_consistency_between_the_store_and_kafka(hermes: Any, client: HermesClient) -> None:
    topic = client.create_topic()
    group = topic.rpartition(".")[0]
    assert group in client.management.get("/consistency/groups").json()
    assert client.management.get("/consistency/inconsistencies/groups", params={"groupNames": group}).json() == []
    assert client.management.post(f"/consistency/sync/groups/{group}").status_code == 200
    assert client.management.post(f"/consistency/sync/topics/{topic}").status_code == 200
    _error(client.management.post(f"/consistency/sync/topics/{group}.missing"), 404, "TOPIC_NOT_EXISTS")
    admin = BrokerAdmin(hermes.hermes.connection)
    stray = unique("stray")
    admin.create_topic(stray, 1)

    def inconsistent() -> list[str]:
        return list(client.management.get("/consistency/inconsistencies/topics").json())

    # the broker's metadata lists a new topic a moment after its creation returned (seen missing once, quiet)
    wait_until(lambda: stray in inconsistent(), timeout=10)
    assert topic not in inconsistent() and "__consumer_offsets" not in inconsistent()
    refused = client.management.delete("/consistency/inconsistencies/topics", params={"topicName": topic})
    _error(refused, 400, "VALIDATION_ERROR")
    assert admin.topic_exists(topic)
    assert (
        client.management.delete("/consistency/inconsistencies/topics", params={"topicName": stray}).status_code == 200
    )
    # the deletion is done when the controller took it; the broker's metadata drops the topic a moment later
    wait_until(lambda: not admin.topic_exists(stray), timeout=30)


def test_offline_retransmission_tasks_of_a_topic(client: HermesClient) -> None:
    source = client.create_topic(offlineStorage={"enabled": True})
    target = client.create_topic()
    created = client.management.post(
        "/offline-retransmission/tasks",
        json={
            "type": "TOPIC",
            "sourceTopic": source,
            "targetTopic": target,
            "startTimestamp": "2026-01-01T00:00:00Z",
            "endTimestamp": "2026-01-01T01:00:00Z",
        },
    )
    assert created.status_code == 201, created.text
    for topic in (source, target):
        for path in (f"/offline-retransmission/topics/{topic}/tasks", f"/offline-retransmission/topics/{topic}/tasks/"):
            [task] = client.management.get(path).json()
            assert task["taskId"] == created.json()["taskId"] and task["type"] == "TOPIC"
    assert client.management.get(f"/offline-retransmission/topics/{client.create_topic()}/tasks").json() == []

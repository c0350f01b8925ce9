"""The management endpoints over the pipeline's data, without Spark: offline retransmission tasks (validation,
storage, listing, deletion) and the tracking reads' answers when nothing was tracked."""

from __future__ import annotations

from typing import Any

import pytest

from hermes.metadata.documents import OFFLINE_RETRANSMISSION_TASKS
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.openapi import conforms_to_openapi

pytestmark = pytest.mark.integration

TASKS = "/offline-retransmission/tasks"
ARCHIVED = {"offlineStorage": {"enabled": True, "retentionTime": {"duration": 7}}}


def request(source: str, target: str, **changes: Any) -> dict[str, Any]:
    return {
        "sourceTopic": source,
        "targetTopic": target,
        "startTimestamp": "2026-11-23T06:00:00Z",
        "endTimestamp": "2026-11-23T08:00:00+01:00",
        **changes,
    }


def test_a_task_is_created_listed_and_deleted(hermes: InProcessHermes, client: HermesClient) -> None:
    source = client.create_topic(**ARCHIVED)
    target = client.create_topic()
    created = client.management.post(TASKS, json=request(source, target))
    assert created.status_code == 201, created.text
    conforms_to_openapi(TASKS, "post", created)
    task = created.json()
    assert task["sourceTopic"] == source and task["targetTopic"] == target and task["type"] == "TOPIC"
    assert task["startTimestamp"] == "2026-11-23T06:00:00.000Z"
    assert task["endTimestamp"] == "2026-11-23T07:00:00.000Z", "instants are answered in UTC"
    assert task["status"] == "PENDING" and task["progress"] == {"republished": 0, "total": None}
    assert hermes.hermes.repository is not None
    assert hermes.hermes.repository.get_document(OFFLINE_RETRANSMISSION_TASKS, task["taskId"]) == task, (
        "stored for the pipeline"
    )

    listed = client.management.get(TASKS)
    assert listed.status_code == 200 and task in listed.json()
    conforms_to_openapi(TASKS, "get", listed)

    assert client.management.delete(f"{TASKS}/{task['taskId']}").status_code == 200
    assert task["taskId"] not in [t["taskId"] for t in client.management.get(TASKS).json()]
    missing = client.management.delete(f"{TASKS}/{task['taskId']}")
    assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sourceTopic": None}, "sourceTopic"),
        ({"targetTopic": ""}, "targetTopic"),
        ({"startTimestamp": None}, "startTimestamp"),
        ({"endTimestamp": "yesterday"}, "endTimestamp"),
        ({"startTimestamp": "2026-11-23T06:00:00"}, "startTimestamp"),  # no zone: not an instant
        ({"startTimestamp": 1763877600000}, "startTimestamp"),
        ({"endTimestamp": "2026-11-23T06:00:00Z"}, "endTimestamp"),  # not after the start
        ({"endTimestamp": "2026-11-23T05:00:00Z"}, "endTimestamp"),
        ({"sourceTopic": "nodots"}, "sourceTopic"),
        ({"sourceTopic": "g.missing"}, "sourceTopic"),
        ({"targetTopic": "g.missing"}, "targetTopic"),
        ({"sourceTopic": "UNARCHIVED"}, "sourceTopic"),
        ({"targetTopic": "AVRO"}, "targetTopic"),
        ({"type": "VIEW"}, "type"),
    ],
)
def test_bad_requests_name_the_field(
    client: HermesClient, topics: dict[str, str], change: dict[str, Any], field: str
) -> None:
    body = request(topics["source"], topics["target"])
    body.update({k: topics.get(v, v) if isinstance(v, str) else v for k, v in change.items()})
    response = client.management.post(TASKS, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["message"].startswith(f"{field}:"), response.json()
    conforms_to_openapi(TASKS, "post", response)


def test_a_body_that_is_not_an_object(client: HermesClient) -> None:
    for body in (b"not json", b"[1, 2]", b""):
        response = client.management.post(TASKS, content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400 and response.json()["code"] == "FORMAT_ERROR", response.text


@pytest.fixture(scope="module")
def topics(hermes: InProcessHermes) -> dict[str, str]:
    api = HermesClient(hermes.management_url, hermes.frontend_url)
    schema = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}'
    try:
        return {
            "source": api.create_topic(**ARCHIVED),
            "target": api.create_topic(),
            "UNARCHIVED": api.create_topic(),
            "AVRO": api.create_topic(contentType="AVRO", schema=schema),
        }
    finally:
        api.close()


def test_tracking_reads_of_an_untracked_subscription(client: HermesClient, topics: dict[str, str]) -> None:
    topic = topics["target"]
    sub = client.create_subscription(topic, "http://my-service/")
    base = f"/topics/{topic}/subscriptions/{sub}"
    for path, template in (
        ("/events/some-id/trace", "/events/{messageId}/trace"),
        ("/undelivered", "/undelivered"),
        ("/statistics", "/statistics"),
    ):
        response = client.management.get(base + path)
        assert response.status_code == 200 and response.json() == [], response.text
        # no pipeline runs here: the empty answer says the tracking job has not read anything yet
        assert response.headers["Hermes-Tracking-Progress"] == "not-started"
        conforms_to_openapi("/topics/{topic}/subscriptions/{subscription}" + template, "get", response)
        unknown = client.management.get(f"/topics/{topic}/subscriptions/nosuch{path}")
        assert unknown.status_code == 400 and unknown.json()["code"] == "SUBSCRIPTION_NOT_EXISTS"  # as Hermes
    for minutes in ("0", "x", "-5", "100000"):
        bad = client.management.get(base + "/statistics", params={"minutes": minutes})
        assert bad.status_code == 400 and bad.json()["message"].startswith("minutes:"), bad.text

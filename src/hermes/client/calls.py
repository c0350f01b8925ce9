"""The requests of the management and publishing APIs and how their answers read, without any I/O: the sync and
the async client send the same ``Call``s, so both speak the API the same way."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from hermes.client.responses import PublishResult, raise_for_error
from hermes.errors import NotFoundError

T = TypeVar("T")
JsonObject = dict[str, Any]
Method = Literal["GET", "POST", "PUT", "DELETE"]
IDEMPOTENCY_KEY = "Idempotency-Key"
# Default owner of what the client creates when the caller names none: Hermes requires one.
DEFAULT_OWNER = {"source": "Plaintext", "id": "hermes-client"}


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request, and how to read its answer (``read`` gets the status and the body; errors never reach it)."""

    method: Method
    path: str
    read: Callable[[int, Mapping[str, str], bytes], T]
    params: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    none_when_absent: bool = False  # a 404 reads as an empty body (``read`` answers None), not as an error

    @property
    def idempotent(self) -> bool:
        """Sent twice, it changes nothing more than once: safe to retry when the answer is lost (a publish with an
        Idempotency-Key too: its repeat is answered as the first, and stores nothing)."""
        return self.method in ("GET", "PUT", "DELETE") or IDEMPOTENCY_KEY in self.headers

    def answer(self, status: int, headers: Mapping[str, str], body: bytes) -> T:
        if status == 404 and self.none_when_absent:
            return self.read(status, headers, b"")
        raise_for_error(status, headers, body, self.path)
        return self.read(status, headers, body)


def _segment(name: str) -> str:
    return quote(name, safe="")


def _json(_status: int, _headers: Mapping[str, str], body: bytes) -> Any:
    return json.loads(body) if body else None


def _nothing(_status: int, _headers: Mapping[str, str], _body: bytes) -> None:
    return None


def _json_body(value: Any) -> tuple[bytes, dict[str, str]]:
    return json.dumps(value).encode(), {"Content-Type": "application/json"}


def _get(path: str, params: Mapping[str, str] | None = None) -> Call[Any]:
    return Call("GET", path, _json, params or {})


def _send(method: Method, path: str, value: Any, params: Mapping[str, str] | None = None) -> Call[Any]:
    body, headers = _json_body(value)
    return Call(method, path, _json, params or {}, body, headers)


def _subscription_path(topic: str, subscription: str) -> str:
    return f"/topics/{_segment(topic)}/subscriptions/{_segment(subscription)}"


# Publishing


def publish(
    topic: str,
    body: bytes | str | Any,
    headers: Mapping[str, str] | None = None,
    partition_key: str | None = None,
    idempotency_key: str | None = None,
) -> Call[PublishResult]:
    """``body``: bytes or text as they are, anything else as JSON. With ``idempotency_key``, a repeat within the
    topic's window stores nothing and gets the first publish's answer, so a lost answer is retried."""
    if isinstance(body, bytes | str):
        content = body.encode() if isinstance(body, str) else body
    else:
        content = _json_body(body)[0]
    sent = {"Content-Type": "application/json", **(headers or {})}
    if partition_key is not None:
        sent["Partition-Key"] = partition_key
    if idempotency_key is not None:
        sent[IDEMPOTENCY_KEY] = idempotency_key
    return Call("POST", f"/topics/{_segment(topic)}", PublishResult.read, {}, content, sent)


# Groups


def groups() -> Call[list[str]]:
    return _get("/groups")


def create_group(name: str) -> Call[None]:
    body, headers = _json_body({"groupName": name})
    return Call("POST", "/groups", _nothing, {}, body, headers)


def delete_group(name: str) -> Call[None]:
    return Call("DELETE", f"/groups/{_segment(name)}", _nothing)


# Topics


def topics(group: str | None = None) -> Call[list[str]]:
    return _get("/topics", {"groupName": group} if group else None)


def topic(name: str) -> Call[JsonObject]:
    return _get(f"/topics/{_segment(name)}")


def create_topic(name: str, fields: Mapping[str, Any]) -> Call[JsonObject]:
    body = {"name": name, "description": "", "owner": DEFAULT_OWNER, "contentType": "JSON", **fields}
    return _send("POST", "/topics", body)


def update_topic(name: str, changes: Mapping[str, Any]) -> Call[None]:
    return Call("PUT", f"/topics/{_segment(name)}", _nothing, {}, *_json_body(dict(changes)))


def delete_topic(name: str) -> Call[None]:
    return Call("DELETE", f"/topics/{_segment(name)}", _nothing)


def topic_metrics(name: str) -> Call[JsonObject]:
    return _get(f"/topics/{_segment(name)}/metrics")


# Subscriptions


def subscriptions(topic: str) -> Call[list[str]]:
    return _get(f"/topics/{_segment(topic)}/subscriptions")


def subscription(topic: str, name: str) -> Call[JsonObject]:
    return _get(_subscription_path(topic, name))


def create_subscription(topic: str, name: str, endpoint: str, fields: Mapping[str, Any]) -> Call[JsonObject]:
    body = {"topicName": topic, "name": name, "endpoint": endpoint, "description": "", "owner": DEFAULT_OWNER}
    return _send("POST", f"/topics/{_segment(topic)}/subscriptions", {**body, **fields})


def update_subscription(topic: str, name: str, changes: Mapping[str, Any]) -> Call[None]:
    return Call("PUT", _subscription_path(topic, name), _nothing, {}, *_json_body(dict(changes)))


def delete_subscription(topic: str, name: str) -> Call[None]:
    return Call("DELETE", _subscription_path(topic, name), _nothing)


def set_state(topic: str, name: str, state: Literal["ACTIVE", "SUSPENDED"]) -> Call[None]:
    return Call("PUT", _subscription_path(topic, name) + "/state", _nothing, {}, *_json_body(state))


def subscription_metrics(topic: str, name: str) -> Call[JsonObject]:
    return _get(_subscription_path(topic, name) + "/metrics")


def subscription_health(topic: str, name: str) -> Call[JsonObject]:
    return _get(_subscription_path(topic, name) + "/health")


def last_undelivered(topic: str, name: str) -> Call[JsonObject | None]:
    """``None`` when nothing was discarded (the API's 404)."""
    return Call("GET", _subscription_path(topic, name) + "/undelivered/last", _json, none_when_absent=True)


def retransmit(topic: str, name: str, since: str, dry_run: bool = False) -> Call[JsonObject]:
    """``since``: an ISO-8601 instant, or a relative ``-6h`` (also ``-30m``, ``-90s``, ``-2d``)."""
    params = {"dryRun": "true"} if dry_run else None
    return _send("PUT", _subscription_path(topic, name) + "/retransmission", {"retransmissionDate": since}, params)


def consumer_groups(topic: str, name: str) -> Call[list[JsonObject]]:
    """The subscription's Kafka consumer group: members, their partitions, offsets and lag."""
    return _get(_subscription_path(topic, name) + "/consumer-groups")


def trace(topic: str, name: str, message_id: str) -> Call[list[JsonObject]]:
    return _get(_subscription_path(topic, name) + f"/events/{_segment(message_id)}/trace")


# Offline retransmission (the pipeline's)


def create_offline_retransmission(source: str, target: str, start: str, end: str) -> Call[JsonObject]:
    body = {"type": "TOPIC", "sourceTopic": source, "targetTopic": target, "startTimestamp": start}
    return _send("POST", "/offline-retransmission/tasks", {**body, "endTimestamp": end})


def offline_retransmissions() -> Call[list[JsonObject]]:
    return _get("/offline-retransmission/tasks")


def delete_offline_retransmission(task_id: str) -> Call[None]:
    return Call("DELETE", f"/offline-retransmission/tasks/{_segment(task_id)}", _nothing)


def find_task(tasks: list[JsonObject], task_id: str) -> JsonObject:
    """The task ``task_id`` of a listing (the API has no look-up of one task)."""
    for task in tasks:
        if task.get("taskId") == task_id:
            return task
    raise NotFoundError(f"no offline retransmission task {task_id}")

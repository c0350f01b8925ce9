"""Offline retransmission tasks: republish a time range of a topic's offline storage (the lake) to a topic.

Management creates them (``/offline-retransmission/tasks``), the pipeline runs them; both share the task as a
document in the metadata repository. Field names are Hermes' (``taskId``, ``type``, ``sourceTopic``,
``targetTopic``, ``startTimestamp``, ``endTimestamp``, ``createdAt``), plus ``status`` and ``progress``.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from hermes.domain.names import TopicName
from hermes.errors import FormattingError, ValidationError


class TaskStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    DONE = "DONE"
    FAILED = "FAILED"


@dataclass(frozen=True)
class RetransmissionTask:
    task_id: str
    source_topic: TopicName
    target_topic: TopicName
    start: datetime  # inclusive, UTC
    end: datetime  # exclusive, UTC
    created_at: datetime
    status: TaskStatus = TaskStatus.PENDING
    republished: int = 0  # messages sent to the target topic so far
    total: int | None = None  # messages in the range, once the job counted them
    error: str | None = None

    @property
    def start_ms(self) -> int:
        return int(self.start.timestamp() * 1000)

    @property
    def end_ms(self) -> int:
        return int(self.end.timestamp() * 1000)

    def with_progress(
        self, status: TaskStatus, republished: int, total: int | None, error: str | None = None
    ) -> RetransmissionTask:
        return dataclasses.replace(self, status=status, republished=republished, total=total, error=error)

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "taskId": self.task_id,
            "type": "TOPIC",
            "sourceTopic": self.source_topic.qualified,
            "targetTopic": self.target_topic.qualified,
            "startTimestamp": _iso(self.start),
            "endTimestamp": _iso(self.end),
            "createdAt": _iso(self.created_at),
            "status": self.status.value,
            "progress": {"republished": self.republished, "total": self.total},
        }
        if self.error is not None:
            document["error"] = self.error
        return document

    @classmethod
    def from_document(cls, document: dict[str, Any]) -> RetransmissionTask:
        progress = document.get("progress") or {}
        return cls(
            task_id=document["taskId"],
            source_topic=TopicName.parse(document["sourceTopic"]),
            target_topic=TopicName.parse(document["targetTopic"]),
            start=parse_instant(document["startTimestamp"], "startTimestamp"),
            end=parse_instant(document["endTimestamp"], "endTimestamp"),
            created_at=parse_instant(document["createdAt"], "createdAt"),
            status=TaskStatus(document.get("status", TaskStatus.PENDING.value)),
            republished=int(progress.get("republished", 0)),
            total=progress.get("total"),
            error=document.get("error"),
        )


def task_from_request(body: Any) -> RetransmissionTask:
    """A new PENDING task from a POST body; checks the shape only (topics are checked against metadata)."""
    if not isinstance(body, dict):
        raise FormattingError("the body must be a JSON object")
    kind = body.get("type", "topic")
    if kind not in ("topic", "TOPIC"):  # Hermes' request names its kind "topic"; its older one, "TOPIC"
        raise ValidationError("only TOPIC retransmission is supported (views are not)", "type")
    for field in ("sourceTopic", "targetTopic", "startTimestamp", "endTimestamp"):
        if body.get(field) in (None, ""):
            raise ValidationError("is required", field)
    start = parse_instant(body["startTimestamp"], "startTimestamp")
    end = parse_instant(body["endTimestamp"], "endTimestamp")
    if end <= start:
        raise ValidationError("must be after startTimestamp", "endTimestamp")
    return RetransmissionTask(
        task_id=str(uuid.uuid4()),
        source_topic=TopicName.parse(body["sourceTopic"], "sourceTopic"),
        target_topic=TopicName.parse(body["targetTopic"], "targetTopic"),
        start=start,
        end=end,
        created_at=datetime.now(UTC),
    )


def parse_instant(value: Any, field: str) -> datetime:
    """An ISO-8601 instant with a zone (``2026-11-23T06:00:00Z`` or ``...+01:00``), as UTC."""
    if not isinstance(value, str):
        raise ValidationError("must be an ISO-8601 instant such as 2026-11-23T06:00:00Z", field)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationError(f"{value!r} is not an ISO-8601 instant such as 2026-11-23T06:00:00Z", field) from None
    if moment.tzinfo is None:
        raise ValidationError(f"{value!r} has no time zone (use Z or an offset such as +01:00)", field)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # the first or last day of year 1 or 9999, shifted beyond them
        raise ValidationError(f"{value!r} is outside the years 1 to 9999 in UTC", field) from None


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

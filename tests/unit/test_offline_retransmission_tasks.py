"""Offline retransmission tasks: their document form, which task runs next (a RUNNING one left by a stopped
pipeline runs again: at least once), progress never resurrecting a deleted task, the republished headers."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from hermes.domain.message import KAFKA_MESSAGE_ID, KAFKA_PUBLISH_TIMESTAMP, KAFKA_SCHEMA_VERSION, PLACEHOLDER_FORMAT
from hermes.domain.retransmission_task import RetransmissionTask, TaskStatus, parse_instant, task_from_request
from hermes.errors import ValidationError
from hermes.metadata.documents import OFFLINE_RETRANSMISSION_TASKS
from hermes.metadata.sqlite import SqliteMetadataRepository
from hermes.pipeline.retransmission import KAFKA_RETRANSMISSION_TASK, frontend_headers, next_task, update

pytestmark = pytest.mark.unit


def task(created_minutes_ago: int, status: TaskStatus) -> RetransmissionTask:
    new = task_from_request(
        {
            "sourceTopic": "g.source",
            "targetTopic": "g.target",
            "startTimestamp": "2026-11-23T06:00:00+02:00",
            "endTimestamp": "2026-11-23T07:00:00+02:00",
        }
    )
    return dataclasses.replace(
        new, created_at=datetime.now(UTC) - timedelta(minutes=created_minutes_ago), status=status
    )


def test_the_document_form_round_trips() -> None:
    original = task(0, TaskStatus.RUNNING).with_progress(TaskStatus.FAILED, 5, 9, "the broker refused")
    assert RetransmissionTask.from_document(original.to_document()) == dataclasses.replace(
        original, created_at=original.created_at.replace(microsecond=original.created_at.microsecond // 1000 * 1000)
    )
    assert original.start_ms == int(datetime(2026, 11, 23, 4, tzinfo=UTC).timestamp() * 1000)


def test_the_oldest_unfinished_task_runs_next(sqlite_repository: SqliteMetadataRepository) -> None:
    assert next_task(sqlite_repository) is None
    tasks = [task(50, TaskStatus.DONE), task(40, TaskStatus.FAILED), task(30, TaskStatus.PENDING)]
    interrupted = task(35, TaskStatus.RUNNING)
    for t in [*tasks, interrupted]:
        sqlite_repository.put_document(OFFLINE_RETRANSMISSION_TASKS, t.task_id, t.to_document())
    found = next_task(sqlite_repository)
    assert found is not None and found.task_id == interrupted.task_id, "left RUNNING by a stopped pipeline: rerun"


def test_progress_never_brings_back_a_deleted_task(sqlite_repository: SqliteMetadataRepository) -> None:
    running = task(0, TaskStatus.RUNNING)
    sqlite_repository.put_document(OFFLINE_RETRANSMISSION_TASKS, running.task_id, running.to_document())
    assert update(sqlite_repository, running.with_progress(TaskStatus.RUNNING, 3, 10))
    assert sqlite_repository.get_document(OFFLINE_RETRANSMISSION_TASKS, running.task_id)["progress"] == {
        "republished": 3,
        "total": 10,
    }  # type: ignore[index]
    sqlite_repository.delete_document(OFFLINE_RETRANSMISSION_TASKS, running.task_id)
    assert not update(sqlite_repository, running.with_progress(TaskStatus.DONE, 10, 10))
    assert sqlite_repository.get_document(OFFLINE_RETRANSMISSION_TASKS, running.task_id) is None


def test_republished_messages_keep_the_original_frontend_headers() -> None:
    row = {
        "message_id": "original-id",
        "published": 1_763_877_600_123,
        "schema_version": 2,
        "headers": {"Trace-Id": "t-1"},
    }
    assert frontend_headers(row, "task-1") == [
        (KAFKA_MESSAGE_ID, b"original-id"),
        (KAFKA_PUBLISH_TIMESTAMP, b"1763877600123"),
        (KAFKA_SCHEMA_VERSION, b"2"),
        ("h-Trace-Id", b"t-1"),
        (KAFKA_RETRANSMISSION_TASK, b"task-1"),
    ]
    assert frontend_headers({**row, "schema_version": None, "headers": None}, "t")[2:] == [
        (KAFKA_RETRANSMISSION_TASK, b"t")
    ]


def test_a_republished_placeholder_of_an_offloaded_message_is_marked_as_one_again() -> None:
    row = {"message_id": "m", "published": 1, "schema_version": None, "headers": {"_format": "external", "A": "b"}}
    assert frontend_headers(row, "t")[2:] == [("h-A", b"b"), PLACEHOLDER_FORMAT, (KAFKA_RETRANSMISSION_TASK, b"t")]


def test_a_republished_cloud_event_keeps_its_attributes() -> None:
    archived = {"Trace-Id": "t-1", "ce_id": "order-1", "ce_type": "com.example.t", "content-type": "text/plain"}
    row = {"message_id": "m", "published": 1, "schema_version": None, "headers": archived}
    assert frontend_headers(row, "t")[2:] == [
        ("h-Trace-Id", b"t-1"),
        ("ce_id", b"order-1"),
        ("ce_type", b"com.example.t"),
        ("content-type", b"text/plain"),
        (KAFKA_RETRANSMISSION_TASK, b"t"),
    ]


def test_an_instant_beyond_the_calendar_in_utc_is_a_400_naming_the_field() -> None:
    for value in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        with pytest.raises(ValidationError, match=r"^startTimestamp: "):
            parse_instant(value, "startTimestamp")

"""Offline retransmission tasks on the management side: validated against the topics, stored as documents
for the pipeline process, which runs them (``hermes.pipeline.retransmission``)."""

from __future__ import annotations

from typing import Any

from hermes.domain.names import TopicName
from hermes.domain.retransmission_task import RetransmissionTask, task_from_request
from hermes.domain.topic import Topic
from hermes.errors import NotFoundError, TopicNotFound, ValidationError
from hermes.metadata.documents import OFFLINE_RETRANSMISSION_TASKS
from hermes.metadata.repository import MetadataRepository


def create_task(repository: MetadataRepository, body: Any) -> RetransmissionTask:
    """Unknown topics are 400s naming the field, as in Hermes (the request is what is wrong, not the path)."""
    task = task_from_request(body)
    source = _topic(repository, task.source_topic, "sourceTopic")
    if not source.offline_storage.enabled:
        raise ValidationError(
            f"topic {source.qualified_name} has no offline storage (offlineStorage.enabled): nothing to read",
            "sourceTopic",
        )
    target = _topic(repository, task.target_topic, "targetTopic")
    if target.content_type is not source.content_type:
        raise ValidationError(
            f"is a {target.content_type.value} topic; the source topic is {source.content_type.value}",
            "targetTopic",
        )
    repository.put_document(OFFLINE_RETRANSMISSION_TASKS, task.task_id, task.to_document())
    return task


def list_tasks(repository: MetadataRepository) -> list[dict[str, Any]]:
    """Every task, oldest first, with its status and progress."""
    return sorted(
        repository.list_documents(OFFLINE_RETRANSMISSION_TASKS).values(),
        key=lambda d: (d.get("createdAt", ""), d["taskId"]),
    )


def delete_task(repository: MetadataRepository, task_id: str) -> None:
    """Forgets the task; a running job notices and stops before its next step."""
    if repository.get_document(OFFLINE_RETRANSMISSION_TASKS, task_id) is None:
        raise NotFoundError(f"No offline retransmission task {task_id}")
    repository.delete_document(OFFLINE_RETRANSMISSION_TASKS, task_id)


def _topic(repository: MetadataRepository, name: TopicName, field: str) -> Topic:
    try:
        return repository.get_topic(name)
    except TopicNotFound:
        raise ValidationError(f"topic {name.qualified} does not exist", field) from None

"""Names of groups, topics and subscriptions, and the safe alphabet they are restricted to."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hermes.errors import ValidationError

# Group names may contain dots; topic and subscription names may not. Kafka allows [a-zA-Z0-9._-].
_GROUP = re.compile(r"^[a-zA-Z0-9_.-]{1,200}$")
_SIMPLE = re.compile(r"^[a-zA-Z0-9_-]{1,200}$")
# The same rules as JSON Schema patterns, for the APIs' OpenAPI documents (a group neither starts nor ends with a dot)
GROUP_PATTERN = r"[a-zA-Z0-9_-](?:[a-zA-Z0-9_.-]{0,198}[a-zA-Z0-9_-])?"
SIMPLE_PATTERN = r"[a-zA-Z0-9_-]{1,200}"
TOPIC_NAME_PATTERN = f"^{GROUP_PATTERN}\\.{SIMPLE_PATTERN}$"


def validate_group_name(name: str, field: str = "groupName") -> str:
    if not isinstance(name, str) or not _GROUP.match(name) or name.startswith(".") or name.endswith("."):
        raise ValidationError("must be 1-200 characters of letters, digits, '.', '_' or '-'", field)
    return name


def validate_simple_name(name: str, field: str) -> str:
    if not isinstance(name, str) or not _SIMPLE.match(name):
        raise ValidationError("must be 1-200 characters of letters, digits, '_' or '-'", field)
    return name


@dataclass(frozen=True, order=True)
class TopicName:
    """A qualified topic name ``group.topic``; the group is everything before the last dot."""

    group: str
    name: str

    @classmethod
    def parse(cls, qualified: str, field: str = "name") -> TopicName:
        if not isinstance(qualified, str) or "." not in qualified:
            raise ValidationError("must be a qualified name 'group.topic'", field)
        group, _, name = qualified.rpartition(".")
        validate_group_name(group, field)
        validate_simple_name(name, field)
        return cls(group, name)

    @property
    def qualified(self) -> str:
        return f"{self.group}.{self.name}"

    def __str__(self) -> str:
        return self.qualified


@dataclass(frozen=True, order=True)
class SubscriptionName:
    topic: TopicName
    name: str

    @property
    def qualified(self) -> str:
        """``group.topic$subscription``, the form Hermes uses in logs and metrics."""
        return f"{self.topic.qualified}${self.name}"

    def __str__(self) -> str:
        return self.qualified

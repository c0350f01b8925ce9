"""Reading stored topics and subscriptions, which may fail today's validation: stored by an older version before a
rule was added, or edited in the store by hand. A broker never refuses to start over one of them: it is read as
``StoredEntityInvalid`` (listed apart from the others, which are served), and a warning names it and its field once
per stored content, in every process that reads it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from hermes.domain import api_json
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Topic
from hermes.errors import StoredEntityInvalid, ValidationError

log = logging.getLogger(__name__)
T = TypeVar("T")
Json = dict[str, Any]


class StoredReader:
    """Parses what a store holds; one per repository, which remembers what it warned of."""

    def __init__(self, unseal_subscription: Callable[[Json], Json]) -> None:
        self._unseal_subscription = unseal_subscription
        self._warned: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def topic(self, name: str, body: bytes) -> Topic:
        def parse(data: Json) -> Topic:
            topic = api_json.topic_from_json(data)
            if topic.qualified_name != name:
                raise ValidationError(f"does not match the name it is stored under ({name})", "name")
            return topic

        return self._read(f"topic {name}", name, {"name": name}, body, lambda data: data, parse)

    def subscription(self, topic: TopicName, name: str, body: bytes) -> Subscription:
        def parse(data: Json) -> Subscription:
            subscription = api_json.subscription_from_json(data, topic)
            if subscription.name != name:
                raise ValidationError(f"does not match the name it is stored under ({name})", "name")
            return subscription

        identity = {"topicName": topic.qualified, "name": name}
        return self._read(
            f"subscription {topic.qualified}${name}", name, identity, body, self._unseal_subscription, parse
        )

    def _read(
        self,
        entity: str,
        name: str,
        identity: Json,
        body: bytes,
        unseal: Callable[[Json], Json],
        parse: Callable[[Json], T],
    ) -> T:
        """``identity``: the names it is stored under, which the stored JSON of an invalid one shows whatever it
        holds (a PUT corrects the rest)."""
        stored: Json = {}
        try:
            loaded = orjson.loads(body)
            if not isinstance(loaded, dict):
                raise ValidationError("is not a JSON object")
            stored = unseal(loaded)
            return parse(stored)
        except ValidationError as problem:
            invalid = StoredEntityInvalid.of(entity, name, {**stored, **identity}, problem)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # a field of a type no reader expects
            # the exception's text could quote a stored secret: only its kind is named
            unreadable = ValidationError(f"cannot be read ({type(exc).__name__})")
            invalid = StoredEntityInvalid.of(entity, name, {**stored, **identity}, unreadable)
        self._warn(invalid, body)
        raise invalid

    def _warn(self, invalid: StoredEntityInvalid, body: bytes) -> None:
        with self._lock:
            if self._warned.get(invalid.entity) == body:
                return
            self._warned[invalid.entity] = body
        log.warning("%s; no role serves it until then", invalid.message)


def or_invalid(read: Callable[..., T], *args: Any) -> T | StoredEntityInvalid:
    """``read(*args)``, or the StoredEntityInvalid it raised: for listings, which hold both."""
    try:
        return read(*args)
    except StoredEntityInvalid as invalid:
        return invalid

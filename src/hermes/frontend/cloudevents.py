"""Publishing to a CloudEvents topic: the request's events (binary, structured or batched mode, checked by
``hermes.domain.cloudevents``) become one message each, the first with the request's ``Hermes-Message-Id``; the
request is answered once every event's message is (201, or 202 when any is not acknowledged yet), or with the
first error (the publisher sends the request again: at least once)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from hermes.broker.topics import kafka_body_limit
from hermes.domain.cloudevents import read_events
from hermes.domain.message import new_message_id
from hermes.domain.topic import Topic
from hermes.errors import PayloadTooLarge
from hermes.http.lean import SpooledBody

if TYPE_CHECKING:
    from hermes.frontend.publishing import Answer, PublishResult

# Publisher._produce: (topic, message id, value, schema version, request headers, answer, offloaded, event)
Produce = Callable[..., None]


def publish_events(
    produce: Produce,
    topic: Topic,
    message_id: str,
    body: bytes | SpooledBody,
    headers: Mapping[str, str],
    answer: Answer,
) -> None:
    """Raises what is wrong with any event of the request, before any is produced."""
    events = read_events(body.read() if isinstance(body, SpooledBody) else body, headers)
    limit = kafka_body_limit(topic)
    for i, event in enumerate(events):
        if len(event.data) > limit:
            which = f"event {i}'s data" if len(events) > 1 else "the event's data"
            raise PayloadTooLarge(
                f"{which}: size {len(event.data)} exceeds the topic's limit {limit} (CloudEvents are not offloaded)"
            )
    if not events:  # an empty batch, which the HTTP binding allows: nothing to produce
        answer(_empty_result(message_id))
        return
    joint = _EventsAnswer(answer, message_id, len(events))
    for i, event in enumerate(events):
        if joint.answered:  # an event refused at once: the request is answered with that
            return
        produce(topic, message_id if i == 0 else new_message_id(), event.data, None, headers, joint, False, event)


def _empty_result(message_id: str) -> PublishResult:
    from hermes.frontend.publishing import PublishResult  # publishing imports this module

    return PublishResult(message_id, True)


class _EventsAnswer:
    """The one answer of a request of several events."""

    __slots__ = ("_acknowledged", "_answer", "_left", "_message_id", "answered")

    def __init__(self, answer: Answer, message_id: str, count: int) -> None:
        self._answer = answer
        self._message_id = message_id
        self._left = count
        self._acknowledged = True
        self.answered = False

    def __call__(self, outcome: PublishResult | Exception) -> None:
        if self.answered:
            return
        if isinstance(outcome, Exception):
            self.answered = True
            self._answer(outcome)
            return
        self._acknowledged = self._acknowledged and outcome.acknowledged
        self._left -= 1
        if self._left == 0:
            self.answered = True
            self._answer(outcome._replace(message_id=self._message_id, acknowledged=self._acknowledged))

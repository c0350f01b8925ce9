"""Publishing one message: validate, stamp a message id, produce, and wait for the ack within the timeout."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

import orjson

from hermes.broker.producer import BrokerProducer, DeliveryReport
from hermes.domain.message import KAFKA_MESSAGE_ID, KAFKA_PUBLISH_TIMESTAMP
from hermes.domain.topic import Ack, ContentType, Topic
from hermes.errors import PayloadTooLarge, ValidationError


@dataclass(frozen=True)
class PublishTimeouts:
    """How long a publish request waits for the broker's ack before answering 202 (seconds)."""

    leader: float = 0.065
    all: float = 0.4

    def for_ack(self, ack: Ack) -> float:
        return self.all if ack is Ack.ALL else self.leader


@dataclass(frozen=True)
class PublishResult:
    message_id: str
    acknowledged: bool  # False: accepted (202), the broker has not acknowledged yet


class Publisher:
    def __init__(self, producer: BrokerProducer, timeouts: PublishTimeouts) -> None:
        self._producer = producer
        self._timeouts = timeouts

    async def publish(self, topic: Topic, body: bytes, partition_key: str | None = None) -> PublishResult:
        if len(body) > topic.max_message_size:
            raise PayloadTooLarge(
                f"Message size {len(body)} exceeds the topic's maxMessageSize {topic.max_message_size}"
            )
        if topic.content_type is ContentType.JSON:
            try:
                orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise ValidationError(f"the message is not valid JSON: {exc}") from None
        message_id = str(uuid.uuid4())
        headers = [
            (KAFKA_MESSAGE_ID, message_id.encode()),
            (KAFKA_PUBLISH_TIMESTAMP, str(int(time.time() * 1000)).encode()),
        ]
        ack = self._producer.send(
            topic.qualified_name,
            body,
            key=partition_key.encode() if partition_key else None,
            headers=headers,
            ack=topic.ack,
        )
        try:
            await asyncio.wait_for(asyncio.shield(ack), self._timeouts.for_ack(topic.ack))
        except TimeoutError:
            ack.add_done_callback(_consume_result)
            return PublishResult(message_id, acknowledged=False)
        return PublishResult(message_id, acknowledged=True)


def _consume_result(future: asyncio.Future[DeliveryReport]) -> None:
    future.exception()  # mark it retrieved; the journal (not this callback) keeps unacknowledged messages

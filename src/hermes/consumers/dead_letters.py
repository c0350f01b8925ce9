"""Writing dead letters (``hermes.domain.dead_letter``) of subscriptions with the dead-letter policy on.

A discard writes its dead letters and waits for the broker's ack (acks=all) before it returns, and the message's
offset is finished only then: a crash in between may write a dead letter twice, never lose one. A write the
broker refuses or does not acknowledge is tried again, after a backoff that doubles up to ``MAX_BACKOFF``, until
it is acknowledged or the delivery is cancelled (its message then stays unfinished and comes again). The topic is
created on the first dead letter of the subscription, and again when a write finds it missing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.producer import BrokerProducer
from hermes.broker.topics import PRODUCER_MAX_BYTES
from hermes.domain.dead_letter import DeadLetter, dead_letter_topic
from hermes.domain.message import Message
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Ack
from hermes.errors import HermesError

log = logging.getLogger(__name__)

FIRST_BACKOFF = 0.2  # seconds before the first retry of a refused write
MAX_BACKOFF = 5.0
DEAD_LETTER_PARTITIONS = 1  # one partition: a dead letter's id is its offset, and ids follow the discards' order

Pause = Callable[[float], Awaitable[None]]


class DeadLetters:
    """Its Kafka clients are made at the first dead letter: a process whose subscriptions write none pays nothing."""

    def __init__(self, connection: KafkaConnection) -> None:
        self._connection = connection
        self._clients: tuple[BrokerProducer, BrokerAdmin] | None = None
        self._created: set[str] = set()  # topics this process created or found

    async def write(
        self,
        subscription: Subscription,
        messages: Sequence[Message],
        reason: str,
        last_status: int | None,
        attempts: int,
        pause: Pause = asyncio.sleep,
    ) -> None:
        """Writes one dead letter per message and returns once the broker acknowledged every one; ``pause``
        waits between retries."""
        topic = dead_letter_topic(subscription.qualified_name)
        at = int(time.time() * 1000)
        pending = [DeadLetter.of(m, reason, last_status, attempts, at) for m in messages]
        backoff = FIRST_BACKOFF
        while True:
            try:
                producer = await self._ensure(topic)
                sent = [
                    producer.send(topic, d.body, key=d.key, headers=d.record_headers(), ack=Ack.ALL) for d in pending
                ]
                outcomes = await asyncio.gather(*sent, return_exceptions=True)
            except HermesError as exc:  # creating the topic failed
                outcomes = [exc] * len(pending)
            failed = [(d, o) for d, o in zip(pending, outcomes, strict=True) if isinstance(o, BaseException)]
            if not failed:
                return
            pending = [d for d, _ in failed]
            error = failed[0][1]
            log.warning(
                "writing %d dead letter(s) of %s to %s failed (%s); trying again in %.1f s",
                len(pending),
                subscription.qualified_name,
                topic,
                getattr(error, "message", error),
                backoff,
            )
            self._created.discard(topic)  # a topic deleted meanwhile is created again
            await pause(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _ensure(self, topic: str) -> BrokerProducer:
        """The producer, once the topic exists."""
        if self._clients is None:  # on the loop, so that two first dead letters make one pair
            self._clients = BrokerProducer(self._connection), BrokerAdmin(self._connection)
        producer, admin = self._clients
        if topic not in self._created:
            await asyncio.to_thread(
                admin.create_topic, topic, DEAD_LETTER_PARTITIONS, max_message_bytes=PRODUCER_MAX_BYTES
            )
            self._created.add(topic)
        return producer

    def close(self, timeout: float = 2.0) -> None:
        if self._clients is not None:
            self._clients[0].close(timeout)
            self._clients[1].close()

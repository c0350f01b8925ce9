"""Publishing the consumers' operational events (``hermes.domain.subscription_events``) to their Hermes topic, as
the frontend would publish a message (a Hermes-Message-Id and a publish timestamp in the Kafka headers), so that
ordinary subscriptions receive them. An event that cannot be produced is logged and dropped: it never holds up a
delivery."""

from __future__ import annotations

import logging
import time

from hermes.broker.producer import BrokerProducer
from hermes.domain.message import kafka_headers, new_message_id
from hermes.domain.subscription import Subscription
from hermes.domain.subscription_events import SUBSCRIPTION_EVENTS, subscription_event
from hermes.domain.topic import Ack

log = logging.getLogger(__name__)


class SubscriptionEvents:
    def __init__(self, producer: BrokerProducer, node: str, cluster: str) -> None:
        self._producer = producer
        self._node = node
        self._cluster = cluster

    def publish(self, subscription: Subscription, state: str, previous: str, reason: str) -> None:
        """Must be called on the event loop. Keyed by subscription: one subscription's events keep their order."""
        now = int(time.time() * 1000)
        topic, name = subscription.topic_name.qualified, subscription.name
        body = subscription_event(topic, name, state, previous, reason, now, self._node, self._cluster)

        def settled(error: Exception | None) -> None:
            if error is not None:
                log.warning("the %s event of %s$%s was not published: %s", state, topic, name, error)

        try:
            self._producer.produce(
                SUBSCRIPTION_EVENTS.qualified,
                body,
                settled,
                key=subscription.qualified_name.qualified.encode(),
                headers=kafka_headers(new_message_id(), now),
                ack=Ack.ALL,
            )
        except Exception as exc:
            settled(exc)

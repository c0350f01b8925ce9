"""Operational events about subscriptions (our extension): each change of a circuit breaker's state, and each
suspension it caused, as a JSON message on the Hermes topic ``hermes.subscription-events``, which anyone may
subscribe to with an ordinary subscription and nobody but Hermes publishes to (its ``auth`` lets no publisher in)."""

from __future__ import annotations

from typing import Any

import orjson

from hermes.domain.names import TopicName
from hermes.domain.topic import Owner, PublishingAuth, Topic

SUBSCRIPTION_EVENTS = TopicName.parse("hermes.subscription-events")

# what the event says happened, by the state entered
EVENTS = {
    "OPEN": "circuitBreakerOpened",
    "HALF_OPEN": "circuitBreakerHalfOpened",
    "CLOSED": "circuitBreakerClosed",
    "SUSPENDED": "subscriptionSuspended",
}


def subscription_events_topic() -> Topic:
    return Topic(
        SUBSCRIPTION_EVENTS,
        description="Hermes' operational events about subscriptions: circuit breakers opening and closing, "
        "subscriptions suspended by their breaker (docs/operations.md)",
        owner=Owner("Plaintext", "hermes"),
        auth=PublishingAuth(publishers=(), enabled=True, unauthenticated_access_enabled=False),
    )


def subscription_event(
    topic: str, subscription: str, state: str, previous: str, reason: str, at: int, node: str, cluster: str
) -> bytes:
    """An event's JSON body: ``state`` entered (a breaker's, or SUSPENDED), ``at`` epoch millis."""
    event: dict[str, Any] = {
        "event": EVENTS[state],
        "topicName": topic,
        "subscription": subscription,
        "state": state,
        "previousState": previous,
        "reason": reason,
        "time": at,
        "node": node,
        "cluster": cluster,
    }
    return orjson.dumps(event)

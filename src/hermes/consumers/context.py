"""What every consumer of a process shares: the broker connection, the sender, the store and the settings."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hermes.broker.connection import KafkaConnection
from hermes.consumers.content import ContentConverter
from hermes.consumers.dead_letters import DeadLetters
from hermes.consumers.offloaded import OffloadedMessages
from hermes.consumers.parking import ParkingLot
from hermes.consumers.rate import RateSettings
from hermes.consumers.resolver import EndpointAddressResolver, EndpointItself
from hermes.consumers.sender.senders import MessageSenders
from hermes.consumers.subscription_events import SubscriptionEvents
from hermes.metadata.repository import MetadataRepository
from hermes.tracker import Tracker

if TYPE_CHECKING:  # imported only when tracing is on: the extra's package
    from hermes.telemetry.spans import Tracing

CrashListener = Callable[[BaseException], None]


@dataclass(frozen=True)
class ConsumerContext:
    connection: KafkaConnection
    sender: MessageSenders
    repository: MetadataRepository
    content: ContentConverter
    node_id: str
    cluster: str
    tracker: Tracker | None = None
    tracing: Tracing | None = None
    events: SubscriptionEvents | None = None  # where circuit breakers announce their changes
    commit_interval: float = 1.0
    metrics_interval: float = 1.0
    session_timeout_ms: int = 6000
    fetch_wait_ms: int = 500
    read_ahead_messages: int = 200
    read_ahead_bytes: int = 4 * 1024 * 1024
    rate: RateSettings = field(default_factory=RateSettings)
    failure_log_interval: float = 30.0
    resolver: EndpointAddressResolver = field(default_factory=EndpointItself)
    offloaded: OffloadedMessages = field(default_factory=OffloadedMessages)
    parking: ParkingLot | None = None  # retry topics (subscriptionPolicy.retryParking)
    dead_letters: DeadLetters | None = None  # for subscriptions with the dead-letter policy on
    # held while metrics snapshots are written: a stopping consumer's last one lands after any taken before it
    metrics_writes: asyncio.Lock = field(default_factory=asyncio.Lock)

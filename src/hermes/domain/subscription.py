"""Subscriptions and their delivery policies, with the defaults of the Hermes subscribing guide."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from hermes.domain.dead_letter import DeadLetterPolicy
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.names import SubscriptionName, TopicName
from hermes.domain.retry_rules import RetryRules
from hermes.domain.topic import ContentType, Owner

MAX_MESSAGE_TTL_SECONDS = 7200
# The window of a SERIAL subscription whose inflightSize is unset (Hermes' consumer default)
DEFAULT_INFLIGHT_SIZE = 100


class SubscriptionState(StrEnum):
    """As Hermes: a new subscription is PENDING until a consumers process runs it, then ACTIVE; consumers run
    PENDING and ACTIVE subscriptions, never SUSPENDED ones."""

    PENDING = "PENDING"
    ACTIVE = "ACTIVE"
    SUSPENDED = "SUSPENDED"


class DeliveryType(StrEnum):
    SERIAL = "SERIAL"
    BATCH = "BATCH"


class CloudEventsMode(StrEnum):
    """How a SERIAL subscription of a CloudEvents topic receives each event (the HTTP binding's content modes);
    BATCH subscriptions receive ``application/cloudevents-batch+json``."""

    BINARY = "BINARY"
    STRUCTURED = "STRUCTURED"


class Ordering(StrEnum):
    """Our extension (Hermes has none): the order in which a SERIAL subscription's deliveries may start. KEY: a
    message waits while an earlier one with the same ``Partition-Key`` is unfinished; a message without a key is
    its own key."""

    NONE = "NONE"
    KEY = "KEY"


class SubscriptionMode(StrEnum):
    ANYCAST = "ANYCAST"
    BROADCAST = "BROADCAST"


class TrackingMode(StrEnum):
    TRACK_ALL = "trackingAll"
    DISCARDED_ONLY = "discardedOnly"
    TRACKING_OFF = "trackingOff"


class Severity(StrEnum):
    CRITICAL = "CRITICAL"
    IMPORTANT = "IMPORTANT"
    NON_IMPORTANT = "NON_IMPORTANT"


@dataclass(frozen=True)
class MonitoringDetails:
    """How much an unhealthy subscription matters (``/unhealthy`` filters on it) and what to do about it."""

    severity: Severity = Severity.NON_IMPORTANT
    reaction: str = ""


@dataclass(frozen=True)
class MessageProcessingMetrics:
    """Hermes' opt-in histogram of processing durations (``metricsConfig.messageProcessing``): stored."""

    enabled: bool = False
    thresholds_milliseconds: tuple[int, ...] = ()


@dataclass(frozen=True)
class RetryParking:
    """Our extension: a message whose next attempt is more than ``threshold_ms`` away waits in the subscription's
    retry topic instead of holding its partition's committed offset back (``hermes.consumers.parking``)."""

    threshold_ms: int = 30_000


# The suffix of a retry topic: a Hermes topic's Kafka name never ends so (its group would end with a dot)
RETRY_TOPIC_SUFFIX = "..parked"
_KAFKA_TOPIC_MAX = 249


def is_retry_topic(kafka_topic: str) -> bool:
    return kafka_topic.endswith(RETRY_TOPIC_SUFFIX)


def retry_topic(topic: TopicName, subscription: str) -> str:
    """The Kafka topic a subscription's parked messages wait in (``RetryParking``); a long name is cut and hashed."""
    name = f"{topic.qualified}..{subscription}"
    if len(name) + len(RETRY_TOPIC_SUFFIX) > _KAFKA_TOPIC_MAX:
        name = name[:200] + hashlib.sha256(name.encode()).hexdigest()[:32]
    return name + RETRY_TOPIC_SUFFIX


@dataclass(frozen=True)
class SerialSubscriptionPolicy:
    """SERIAL delivery. Durations are in millis unless the name says otherwise."""

    rate: int = 400  # messages per second, a hard maximum
    message_ttl: int = 3600  # seconds a message may stay inflight
    message_backoff: int = 100
    retry_client_errors: bool = False
    request_timeout: int = 1000
    socket_timeout: int = 0  # 0 = no limit
    inflight_size: int | None = None  # unset: DEFAULT_INFLIGHT_SIZE, and left out of the JSON as Hermes does
    sending_delay: int = 0
    backoff_multiplier: float = 1.0
    backoff_max_interval_in_sec: int = 600
    ordering: Ordering = Ordering.NONE  # left out of the JSON when NONE, so Hermes' shape is unchanged
    retry_parking: RetryParking | None = None  # off, and left out of the JSON, when None

    @property
    def inflight_limit(self) -> int:
        return self.inflight_size or DEFAULT_INFLIGHT_SIZE


@dataclass(frozen=True)
class BatchSubscriptionPolicy:
    message_ttl: int = 60
    message_backoff: int = 500
    retry_client_errors: bool = False
    request_timeout: int = 30000
    batch_size: int = 100
    batch_time: int = 30000
    batch_volume: int = 64000


@dataclass(frozen=True)
class CircuitBreakerPolicy:
    """Our extension (``circuitBreaker``; none: Hermes' behaviour, no breaker): when a subscription's endpoint keeps
    failing, attempts pause and one probe goes at a time (``hermes.consumers.breaker``). Durations in millis."""

    consecutive_failures: int = 20  # failed attempts in a row that open it
    failure_ratio: float = 0.5  # or this share of the attempts of the last ``window`` failed...
    window: int = 60_000
    minimum_requests: int = 20  # ...when there were at least this many
    probe_interval: int = 5_000  # while open, one probe attempt per interval
    suspend_after: int | None = None  # open this long: the subscription is SUSPENDED (None: never)


@dataclass(frozen=True)
class Header:
    name: str
    value: str


class MatchingStrategy(StrEnum):
    ALL = "all"
    ANY = "any"


@dataclass(frozen=True)
class MessageFilterSpecification:
    """A filter as declared on a subscription: ``type`` is jsonpath, avropath or header."""

    type: str
    matcher: str
    path: str | None = None
    header: str | None = None
    matching_strategy: MatchingStrategy = MatchingStrategy.ALL


@dataclass(frozen=True)
class OAuthPolicy:
    grant_type: str  # clientCredentials | password
    provider_name: str
    scope: str | None = None
    username: str | None = None
    password: str | None = None


@dataclass(frozen=True)
class Subscription:
    topic_name: TopicName
    name: str
    endpoint: EndpointAddress
    description: str = ""
    owner: Owner = field(default_factory=Owner)
    contact: str = ""
    state: SubscriptionState = SubscriptionState.PENDING
    content_type: ContentType = ContentType.JSON
    delivery_type: DeliveryType = DeliveryType.SERIAL
    # Our extension: None delivers a CloudEvents topic's events in binary mode, and is left out of the JSON
    cloud_events_mode: CloudEventsMode | None = None
    serial_policy: SerialSubscriptionPolicy = field(default_factory=SerialSubscriptionPolicy)
    batch_policy: BatchSubscriptionPolicy = field(default_factory=BatchSubscriptionPolicy)
    # Our extension of either policy (subscriptionPolicy.statusRules, .backoffJitter, .stopRetryHeaderAllowed)
    retry_rules: RetryRules = field(default_factory=RetryRules)
    mode: SubscriptionMode = SubscriptionMode.ANYCAST
    headers: tuple[Header, ...] = ()
    filters: tuple[MessageFilterSpecification, ...] = ()
    endpoint_address_resolver_metadata: dict[str, Any] = field(default_factory=dict)
    subscription_identity_headers_enabled: bool = False
    tracking_mode: TrackingMode = TrackingMode.TRACKING_OFF
    oauth_policy: OAuthPolicy | None = None
    http2_enabled: bool = False
    auto_delete_with_topic_enabled: bool = False
    monitoring_details: MonitoringDetails = field(default_factory=MonitoringDetails)
    profiling_enabled: bool = False
    profiling_threshold_ms: int = 0
    metrics_config: MessageProcessingMetrics = field(default_factory=MessageProcessingMetrics)
    circuit_breaker: CircuitBreakerPolicy | None = None  # our extension: None, no breaker (and not in the JSON)
    # Standard Webhooks secrets the deliveries are signed with (our extension; hermes.domain.signing)
    signing_secrets: tuple[str, ...] = field(default=(), repr=False)
    # Epoch millis until which the second secret, the one a generated secret replaced, still signs (0: no end)
    previous_secret_expires_at: int = 0
    # Our extension: what it discards goes to its dead-letter topic (hermes.domain.dead_letter); absent when off
    dead_letters: DeadLetterPolicy = field(default_factory=DeadLetterPolicy)
    created_at: int = 0
    modified_at: int = 0

    @property
    def qualified_name(self) -> SubscriptionName:
        return SubscriptionName(self.topic_name, self.name)

    @property
    def is_batch(self) -> bool:
        return self.delivery_type is DeliveryType.BATCH

    @property
    def runs(self) -> bool:
        """Whether consumers deliver it (PENDING: not yet started by any, but to be)."""
        return self.state is not SubscriptionState.SUSPENDED

    @property
    def message_ttl_seconds(self) -> int:
        return self.batch_policy.message_ttl if self.is_batch else self.serial_policy.message_ttl

    @property
    def tracking_enabled(self) -> bool:
        return self.tracking_mode is not TrackingMode.TRACKING_OFF

    @property
    def consumer_group_id(self) -> str:
        """The Kafka consumer group that keeps this subscription's committed offsets."""
        return f"hermes_{self.topic_name.qualified}_{self.name}"

    @property
    def retry_topic(self) -> str:
        return retry_topic(self.topic_name, self.name)

    @property
    def parking_group_id(self) -> str:
        """The consumer group keeping the offsets of its retry topic (never a member: offsets set from outside)."""
        return f"hermes-parked_{self.topic_name.qualified}_{self.name}"

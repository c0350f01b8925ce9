"""Groups and topics."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from hermes.domain.names import TopicName


class ContentType(StrEnum):
    JSON = "JSON"
    AVRO = "AVRO"


class Ack(StrEnum):
    NONE = "NONE"  # acks=0: answered once the producer has the message, as Hermes does
    LEADER = "LEADER"
    ALL = "ALL"


class ChaosMode(StrEnum):
    DISABLED = "DISABLED"
    GLOBAL = "GLOBAL"
    DATACENTER = "DATACENTER"


class RetentionUnit(StrEnum):
    SECONDS = "SECONDS"
    MINUTES = "MINUTES"
    HOURS = "HOURS"
    DAYS = "DAYS"


_UNIT_SECONDS = {
    RetentionUnit.SECONDS: 1,
    RetentionUnit.MINUTES: 60,
    RetentionUnit.HOURS: 3600,
    RetentionUnit.DAYS: 86400,
}


@dataclass(frozen=True)
class RetentionTime:
    duration: int = 1
    unit: RetentionUnit = RetentionUnit.DAYS

    @property
    def seconds(self) -> int:
        return self.duration * _UNIT_SECONDS[self.unit]


@dataclass(frozen=True)
class Owner:
    source: str = "Plaintext"
    id: str = ""


@dataclass(frozen=True)
class OfflineRetentionTime:
    """How long the offline storage keeps a topic's messages, in days; ``infinite`` keeps them forever."""

    duration: int = 60
    infinite: bool = False


@dataclass(frozen=True)
class OfflineStorage:
    enabled: bool = False
    retention_time: OfflineRetentionTime = field(default_factory=OfflineRetentionTime)


@dataclass(frozen=True)
class PublishingAuth:
    """Who may publish: stored and returned; enforced once management and publishing have authentication."""

    publishers: tuple[str, ...] = ()
    enabled: bool = False
    unauthenticated_access_enabled: bool = True


@dataclass(frozen=True)
class ChaosPolicy:
    """Hermes' publishing fault injection for one datacenter (or all): stored and returned, not applied."""

    probability: int = 0
    delay_from: int = 0
    delay_to: int = 0
    complete_with_error: bool = False


@dataclass(frozen=True)
class PublishingChaosPolicy:
    mode: ChaosMode = ChaosMode.DISABLED
    global_policy: ChaosPolicy | None = None
    datacenter_policies: tuple[tuple[str, ChaosPolicy], ...] = ()


@dataclass(frozen=True)
class Group:
    name: str


DEFAULT_MAX_MESSAGE_SIZE = 50 * 1024
# How long a publish's Idempotency-Key is remembered (seconds): the longest window keeps every key this long
MAX_IDEMPOTENCY_WINDOW = 7 * 86400
DEFAULT_IDEMPOTENCY_WINDOW = RetentionTime(24, RetentionUnit.HOURS)


@dataclass(frozen=True)
class Topic:
    name: TopicName
    description: str = ""
    owner: Owner = field(default_factory=Owner)
    content_type: ContentType = ContentType.JSON
    ack: Ack = Ack.LEADER
    retention_time: RetentionTime = field(default_factory=RetentionTime)
    tracking_enabled: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    # Our extension: the largest body offloaded beside Kafka; 0 is the frontend's --offload-max-message-size, and
    # more than that is capped by it
    offload_max_message_size: int = 0
    offline_storage: OfflineStorage = field(default_factory=OfflineStorage)
    subscribing_restricted: bool = False
    auth: PublishingAuth = field(default_factory=PublishingAuth)
    json_to_avro_dry_run: bool = False
    # Our extension (Hermes takes any body on JSON topics): refuse a body that is not JSON, or not sent as JSON
    json_validation_enabled: bool = False
    # Our extension: the topic takes CloudEvents only (hermes.domain.cloudevents); a flag beside contentType, which
    # says how the data is encoded (JSON or Avro) as Hermes' clients know it, where this says how events are framed
    cloud_events: bool = False
    migrated_from_json_type: bool = False
    fallback_to_remote_datacenter_enabled: bool = False
    chaos: PublishingChaosPolicy = field(default_factory=PublishingChaosPolicy)
    # Our extension: how long a publish's Idempotency-Key makes repeats of it answer without producing
    idempotency_window: RetentionTime = DEFAULT_IDEMPOTENCY_WINDOW
    created_at: int = 0  # epoch millis, set by the repository
    modified_at: int = 0

    @property
    def qualified_name(self) -> str:
        return self.name.qualified

"""Owners and topics in Hermes' JSON shape."""

from __future__ import annotations

from typing import Any

from hermes.domain.api_json.fields import (
    Json,
    read_bool,
    read_enum,
    read_int,
    read_object,
    read_str,
    read_strings,
    read_timestamp,
    seconds,
)
from hermes.domain.names import TopicName
from hermes.domain.topic import (
    DEFAULT_IDEMPOTENCY_WINDOW,
    MAX_IDEMPOTENCY_WINDOW,
    Ack,
    ChaosMode,
    ChaosPolicy,
    ContentType,
    OfflineRetentionTime,
    OfflineStorage,
    Owner,
    PublishingAuth,
    PublishingChaosPolicy,
    RetentionTime,
    RetentionUnit,
    Topic,
)
from hermes.errors import ValidationError

MAX_CHAOS_DELAY_MS = 300_000
MIN_MAX_MESSAGE_SIZE = 1024
MAX_MAX_MESSAGE_SIZE = 2 * 1024 * 1024 * 1024  # librdkafka's message.max.bytes ceiling is far below; see docs


def owner_from_json(value: Any, field: str = "owner") -> Owner:
    data = read_object(value, field)
    return Owner(
        source=read_str(data, "source", "Plaintext", f"{field}.source"), id=read_str(data, "id", "", f"{field}.id")
    )


def check_owner_named(body: Json, *, created: bool) -> None:
    """A request's owner must name one, and a new topic or subscription must have one, as Hermes' owner is
    ``@NotNull``: the console submits an empty id when nothing was typed, and without an owner id the console
    offers nobody to edit it. (Documents stored before this check may still have an empty one.)"""
    owner, field = body.get("owner"), "owner.id"
    if owner is None and body.get("supportTeam") is not None:  # a subscription's older shape
        owner, field = {"id": body["supportTeam"]}, "supportTeam"
    if owner is None:
        if created or "owner" in body:  # a change to "owner": null would leave nobody owning it
            raise ValidationError("is required: {source: Plaintext, id: the owning team}", "owner")
        return
    owner_id = (owner.get("id") or "") if isinstance(owner, dict) else None
    if isinstance(owner_id, str) and not owner_id.strip():  # a wrong type is the parser's to name
        raise ValidationError("must not be empty: name the owning team", field)


def owner_to_json(owner: Owner) -> Json:
    return {"source": owner.source, "id": owner.id}


# --- topics ------------------------------------------------------------------------------------------


def topic_from_json(data: Any, *, topic_partitions_limit: int | None = None) -> Topic:
    body = read_object(data, "topic")
    name = TopicName.parse(body.get("name"), "name")  # type: ignore[arg-type]
    retention = read_object(body.get("retentionTime"), "retentionTime")
    offline = read_object(body.get("offlineStorage"), "offlineStorage")
    offline_retention = read_object(offline.get("retentionTime"), "offlineStorage.retentionTime")
    content_type = read_enum(body, "contentType", ContentType, ContentType.JSON, "contentType")
    cloud_events = read_bool(body, "cloudEvents", False)
    if cloud_events and content_type is not ContentType.JSON:
        raise ValidationError(
            "CloudEvents topics take JSON, binary or text data: contentType must be JSON", "cloudEvents"
        )
    return Topic(
        name=name,
        description=read_str(body, "description", ""),
        owner=owner_from_json(body.get("owner")),
        content_type=content_type,
        ack=read_enum(body, "ack", Ack, Ack.LEADER, "ack"),
        retention_time=RetentionTime(
            duration=read_int(retention, "duration", 1, "retentionTime.duration", 1, 10**6),
            unit=read_enum(
                retention, "retentionUnit", RetentionUnit, RetentionUnit.DAYS, "retentionTime.retentionUnit"
            ),
        ),
        tracking_enabled=read_bool(body, "trackingEnabled", False),
        max_message_size=read_int(
            body, "maxMessageSize", 50 * 1024, "maxMessageSize", MIN_MAX_MESSAGE_SIZE, MAX_MAX_MESSAGE_SIZE
        ),
        offload_max_message_size=0
        if body.get("offloadMaxMessageSize") is None
        else read_int(body, "offloadMaxMessageSize", 0, "offloadMaxMessageSize", 1, MAX_MAX_MESSAGE_SIZE),
        offline_storage=OfflineStorage(
            enabled=read_bool(offline, "enabled", False, "offlineStorage.enabled"),
            retention_time=OfflineRetentionTime(
                duration=read_int(
                    offline_retention, "duration", 60, "offlineStorage.retentionTime.duration", 1, 36_500
                ),
                infinite=read_bool(offline_retention, "infinite", False, "offlineStorage.retentionTime.infinite"),
            ),
        ),
        subscribing_restricted=read_bool(body, "subscribingRestricted", False),
        auth=_publishing_auth(body.get("auth")),
        json_to_avro_dry_run=read_bool(body, "jsonToAvroDryRun", False),
        json_validation_enabled=read_bool(body, "jsonValidationEnabled", False),
        cloud_events=cloud_events,
        migrated_from_json_type=read_bool(body, "migratedFromJsonType", False),
        fallback_to_remote_datacenter_enabled=read_bool(body, "fallbackToRemoteDatacenterEnabled", False),
        chaos=_chaos(body.get("chaos")),
        idempotency_window=_idempotency_window(body.get("idempotencyWindow")),
        created_at=read_timestamp(body, "createdAt"),
        modified_at=read_timestamp(body, "modifiedAt"),
    )


def _idempotency_window(value: Any) -> RetentionTime:
    """In the shape of the topic's ``retentionTime``; at most ``MAX_IDEMPOTENCY_WINDOW``."""
    if value is None:
        return DEFAULT_IDEMPOTENCY_WINDOW
    data = read_object(value, "idempotencyWindow")
    window = RetentionTime(
        duration=read_int(data, "duration", 24, "idempotencyWindow.duration", 1, MAX_IDEMPOTENCY_WINDOW),
        unit=read_enum(data, "retentionUnit", RetentionUnit, RetentionUnit.HOURS, "idempotencyWindow.retentionUnit"),
    )
    if window.seconds > MAX_IDEMPOTENCY_WINDOW:
        raise ValidationError(f"must be at most {MAX_IDEMPOTENCY_WINDOW // 86400} days", "idempotencyWindow")
    return window


def _publishing_auth(value: Any) -> PublishingAuth:
    data = read_object(value, "auth")
    return PublishingAuth(
        publishers=read_strings(data.get("publishers"), "auth.publishers"),
        enabled=read_bool(data, "enabled", False, "auth.enabled"),
        unauthenticated_access_enabled=read_bool(
            data, "unauthenticatedAccessEnabled", True, "auth.unauthenticatedAccessEnabled"
        ),
    )


def _chaos_policy(value: Any, field: str) -> ChaosPolicy:
    data = read_object(value, field)
    delay_from = read_int(data, "delayFrom", 0, f"{field}.delayFrom", 0, MAX_CHAOS_DELAY_MS)
    return ChaosPolicy(
        probability=read_int(data, "probability", 0, f"{field}.probability", 0, 100),
        delay_from=delay_from,
        delay_to=read_int(data, "delayTo", delay_from, f"{field}.delayTo", delay_from, MAX_CHAOS_DELAY_MS),
        complete_with_error=read_bool(data, "completeWithError", False, f"{field}.completeWithError"),
    )


def _chaos(value: Any) -> PublishingChaosPolicy:
    data = read_object(value, "chaos")
    policies = read_object(data.get("datacenterPolicies"), "chaos.datacenterPolicies")
    glob = data.get("globalPolicy")
    return PublishingChaosPolicy(
        mode=read_enum(data, "mode", ChaosMode, ChaosMode.DISABLED, "chaos.mode"),
        global_policy=None if glob is None else _chaos_policy(glob, "chaos.globalPolicy"),
        datacenter_policies=tuple(
            (dc, _chaos_policy(p, f"chaos.datacenterPolicies.{dc}")) for dc, p in sorted(policies.items())
        ),
    )


def _chaos_policy_to_json(policy: ChaosPolicy) -> Json:
    return {
        "probability": policy.probability,
        "delayFrom": policy.delay_from,
        "delayTo": policy.delay_to,
        "completeWithError": policy.complete_with_error,
    }


def _chaos_to_json(chaos: PublishingChaosPolicy) -> Json:
    out: Json = {"mode": chaos.mode.value}
    if chaos.global_policy is not None:
        out["globalPolicy"] = _chaos_policy_to_json(chaos.global_policy)
    out["datacenterPolicies"] = {dc: _chaos_policy_to_json(p) for dc, p in chaos.datacenter_policies}
    return out


def topic_to_json(topic: Topic) -> Json:
    out = _topic_fields(topic)
    if topic.offload_max_message_size:  # shown only when set: Hermes has no such field
        out["offloadMaxMessageSize"] = topic.offload_max_message_size
    if topic.cloud_events:  # likewise
        out["cloudEvents"] = True
    return out


def _topic_fields(topic: Topic) -> Json:
    return {
        "name": topic.qualified_name,
        "description": topic.description,
        "owner": owner_to_json(topic.owner),
        "contentType": topic.content_type.value,
        "ack": topic.ack.value,
        "retentionTime": {"duration": topic.retention_time.duration, "retentionUnit": topic.retention_time.unit.value},
        "trackingEnabled": topic.tracking_enabled,
        "maxMessageSize": topic.max_message_size,
        "offlineStorage": {
            "enabled": topic.offline_storage.enabled,
            "retentionTime": {
                "duration": topic.offline_storage.retention_time.duration,
                "infinite": topic.offline_storage.retention_time.infinite,
            },
        },
        "subscribingRestricted": topic.subscribing_restricted,
        "auth": {
            "publishers": list(topic.auth.publishers),
            "enabled": topic.auth.enabled,
            "unauthenticatedAccessEnabled": topic.auth.unauthenticated_access_enabled,
        },
        "jsonToAvroDryRun": topic.json_to_avro_dry_run,
        "jsonValidationEnabled": topic.json_validation_enabled,
        "migratedFromJsonType": topic.migrated_from_json_type,
        "fallbackToRemoteDatacenterEnabled": topic.fallback_to_remote_datacenter_enabled,
        "chaos": _chaos_to_json(topic.chaos),
        "idempotencyWindow": {
            "duration": topic.idempotency_window.duration,
            "retentionUnit": topic.idempotency_window.unit.value,
        },
        "createdAt": seconds(topic.created_at),
        "modifiedAt": seconds(topic.modified_at),
    }

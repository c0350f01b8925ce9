"""The Hermes JSON shape of groups, topics, subscriptions and OAuth providers.

One translation, used both by the management API (requests and responses) and by the metadata
repositories (what they store). Parsing validates every field and raises ``ValidationError`` naming the
field; rendering with ``mask_secrets`` hides passwords and client secrets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from jsonpath_ng.exceptions import JSONPathError
from jsonpath_ng.ext import parse as parse_jsonpath  # type: ignore[attr-defined]

from hermes.domain.endpoint import EndpointAddress
from hermes.domain.names import TopicName, validate_simple_name
from hermes.domain.oauth import OAuthProvider
from hermes.domain.subscription import (
    MAX_MESSAGE_TTL_SECONDS,
    BatchSubscriptionPolicy,
    DeliveryType,
    Header,
    MatchingStrategy,
    MessageFilterSpecification,
    MessageProcessingMetrics,
    MonitoringDetails,
    OAuthPolicy,
    SerialSubscriptionPolicy,
    Severity,
    Subscription,
    SubscriptionContentType,
    SubscriptionMode,
    SubscriptionState,
    TrackingMode,
)
from hermes.domain.topic import (
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
from hermes.errors import FormattingError, ValidationError

SECRET_MASK = "******"
MAX_CHAOS_DELAY_MS = 300_000
MIN_MAX_MESSAGE_SIZE = 1024
MAX_MAX_MESSAGE_SIZE = 2 * 1024 * 1024 * 1024  # librdkafka's message.max.bytes ceiling is far below; see docs

E = TypeVar("E", bound=StrEnum)
Json = dict[str, Any]


# --- field readers -------------------------------------------------------------------------------------


def _obj(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FormattingError("must be a JSON object", field)
    return value


def _str(data: Mapping[str, Any], key: str, default: str, field: str | None = None) -> str:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValidationError("must be a string", field or key)
    return value


def _opt_str(data: Mapping[str, Any], key: str, field: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValidationError("must be a string", field)
    return value


def _bool(data: Mapping[str, Any], key: str, default: bool, field: str | None = None) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValidationError("must be true or false", field or key)
    return value


def _int(
    data: Mapping[str, Any], key: str, default: int, field: str, lo: int | None = None, hi: int | None = None
) -> int:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValidationError("must be an integer", field)
    value = int(value)
    if lo is not None and value < lo:
        raise ValidationError(f"must be at least {lo}", field)
    if hi is not None and value > hi:
        raise ValidationError(f"must be at most {hi}", field)
    return value


def _float(data: Mapping[str, Any], key: str, default: float, field: str, lo: float, hi: float) -> float:
    value = data.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError("must be a number", field)
    if not lo <= value <= hi:
        raise ValidationError(f"must be between {lo} and {hi}", field)
    return float(value)


def _enum(data: Mapping[str, Any], key: str, enum: type[E], default: E, field: str) -> E:
    value = data.get(key, default)
    if value is None:
        return default
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(e.value for e in enum)
        raise ValidationError(f"must be one of: {allowed}", field) from None


def _timestamp(data: Mapping[str, Any], key: str) -> int:
    """Epoch millis from Hermes' wire form, decimal epoch seconds (Jackson's ``Instant``). Records stored
    before the wire form was seconds hold millis; no date of this century is below 10**11 in millis."""
    value = data.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ValidationError("must be epoch seconds", key)
    return int(value) if value >= 10**11 else round(value * 1000)


def _seconds(millis: int) -> float | int:
    return millis // 1000 if millis % 1000 == 0 else millis / 1000


def _strings(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError("must be an array of strings", field)
    return tuple(value)


# --- owners, groups --------------------------------------------------------------------------------------


def owner_from_json(value: Any, field: str = "owner") -> Owner:
    data = _obj(value, field)
    return Owner(source=_str(data, "source", "Plaintext", f"{field}.source"), id=_str(data, "id", "", f"{field}.id"))


def owner_to_json(owner: Owner) -> Json:
    return {"source": owner.source, "id": owner.id}


# --- topics ------------------------------------------------------------------------------------------


def topic_from_json(data: Any, *, topic_partitions_limit: int | None = None) -> Topic:
    body = _obj(data, "topic")
    name = TopicName.parse(body.get("name"), "name")  # type: ignore[arg-type]
    retention = _obj(body.get("retentionTime"), "retentionTime")
    offline = _obj(body.get("offlineStorage"), "offlineStorage")
    offline_retention = _obj(offline.get("retentionTime"), "offlineStorage.retentionTime")
    return Topic(
        name=name,
        description=_str(body, "description", ""),
        owner=owner_from_json(body.get("owner")),
        content_type=_enum(body, "contentType", ContentType, ContentType.JSON, "contentType"),
        ack=_enum(body, "ack", Ack, Ack.LEADER, "ack"),
        retention_time=RetentionTime(
            duration=_int(retention, "duration", 1, "retentionTime.duration", 1, 10**6),
            unit=_enum(retention, "retentionUnit", RetentionUnit, RetentionUnit.DAYS, "retentionTime.retentionUnit"),
        ),
        tracking_enabled=_bool(body, "trackingEnabled", False),
        max_message_size=_int(
            body, "maxMessageSize", 50 * 1024, "maxMessageSize", MIN_MAX_MESSAGE_SIZE, MAX_MAX_MESSAGE_SIZE
        ),
        offline_storage=OfflineStorage(
            enabled=_bool(offline, "enabled", False, "offlineStorage.enabled"),
            retention_time=OfflineRetentionTime(
                duration=_int(offline_retention, "duration", 60, "offlineStorage.retentionTime.duration", 1, 36_500),
                infinite=_bool(offline_retention, "infinite", False, "offlineStorage.retentionTime.infinite"),
            ),
        ),
        subscribing_restricted=_bool(body, "subscribingRestricted", False),
        auth=_publishing_auth(body.get("auth")),
        json_to_avro_dry_run=_bool(body, "jsonToAvroDryRun", False),
        json_validation_enabled=_bool(body, "jsonValidationEnabled", False),
        migrated_from_json_type=_bool(body, "migratedFromJsonType", False),
        fallback_to_remote_datacenter_enabled=_bool(body, "fallbackToRemoteDatacenterEnabled", False),
        chaos=_chaos(body.get("chaos")),
        created_at=_timestamp(body, "createdAt"),
        modified_at=_timestamp(body, "modifiedAt"),
    )


def _publishing_auth(value: Any) -> PublishingAuth:
    data = _obj(value, "auth")
    return PublishingAuth(
        publishers=_strings(data.get("publishers"), "auth.publishers"),
        enabled=_bool(data, "enabled", False, "auth.enabled"),
        unauthenticated_access_enabled=_bool(
            data, "unauthenticatedAccessEnabled", True, "auth.unauthenticatedAccessEnabled"
        ),
    )


def _chaos_policy(value: Any, field: str) -> ChaosPolicy:
    data = _obj(value, field)
    delay_from = _int(data, "delayFrom", 0, f"{field}.delayFrom", 0, MAX_CHAOS_DELAY_MS)
    return ChaosPolicy(
        probability=_int(data, "probability", 0, f"{field}.probability", 0, 100),
        delay_from=delay_from,
        delay_to=_int(data, "delayTo", delay_from, f"{field}.delayTo", delay_from, MAX_CHAOS_DELAY_MS),
        complete_with_error=_bool(data, "completeWithError", False, f"{field}.completeWithError"),
    )


def _chaos(value: Any) -> PublishingChaosPolicy:
    data = _obj(value, "chaos")
    policies = _obj(data.get("datacenterPolicies"), "chaos.datacenterPolicies")
    glob = data.get("globalPolicy")
    return PublishingChaosPolicy(
        mode=_enum(data, "mode", ChaosMode, ChaosMode.DISABLED, "chaos.mode"),
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
        "createdAt": _seconds(topic.created_at),
        "modifiedAt": _seconds(topic.modified_at),
    }


# --- subscriptions -----------------------------------------------------------------------------------

FILTER_TYPES = frozenset({"jsonpath", "avropath", "header"})
JSONPATH = re.compile(r"^\$(\.\.?[A-Za-z0-9_*\-]+|\[[^\]]+\])*$")
AVROPATH = re.compile(r"^(\.[A-Za-z_][A-Za-z0-9_]*(\[(\d+|\*)\])?)+$")


def _serial_policy(data: Mapping[str, Any]) -> SerialSubscriptionPolicy:
    f = "subscriptionPolicy."
    d = SerialSubscriptionPolicy()
    return SerialSubscriptionPolicy(
        rate=_int(data, "rate", d.rate, f + "rate", 1, 1_000_000),
        message_ttl=_int(data, "messageTtl", d.message_ttl, f + "messageTtl", 0, MAX_MESSAGE_TTL_SECONDS),
        message_backoff=_int(data, "messageBackoff", d.message_backoff, f + "messageBackoff", 0, 3_600_000),
        retry_client_errors=_bool(data, "retryClientErrors", d.retry_client_errors, f + "retryClientErrors"),
        request_timeout=_int(data, "requestTimeout", d.request_timeout, f + "requestTimeout", 100, 300_000),
        socket_timeout=_int(data, "socketTimeout", d.socket_timeout, f + "socketTimeout", 0, 300_000),
        inflight_size=_int(data, "inflightSize", d.inflight_size, f + "inflightSize", 1, 10_000),
        sending_delay=_int(data, "sendingDelay", d.sending_delay, f + "sendingDelay", 0, 5000),
        backoff_multiplier=_float(data, "backoffMultiplier", d.backoff_multiplier, f + "backoffMultiplier", 1, 10),
        backoff_max_interval_in_sec=_int(
            data, "backoffMaxIntervalInSec", d.backoff_max_interval_in_sec, f + "backoffMaxIntervalInSec", 1, 600
        ),
    )


def _batch_policy(data: Mapping[str, Any]) -> BatchSubscriptionPolicy:
    f = "subscriptionPolicy."
    d = BatchSubscriptionPolicy()
    return BatchSubscriptionPolicy(
        message_ttl=_int(data, "messageTtl", d.message_ttl, f + "messageTtl", 0, MAX_MESSAGE_TTL_SECONDS),
        message_backoff=_int(data, "messageBackoff", d.message_backoff, f + "messageBackoff", 0, 3_600_000),
        retry_client_errors=_bool(data, "retryClientErrors", d.retry_client_errors, f + "retryClientErrors"),
        request_timeout=_int(data, "requestTimeout", d.request_timeout, f + "requestTimeout", 100, 300_000),
        batch_size=_int(data, "batchSize", d.batch_size, f + "batchSize", 1, 1_000_000),
        batch_time=_int(data, "batchTime", d.batch_time, f + "batchTime", 1, 3_600_000),
        batch_volume=_int(data, "batchVolume", d.batch_volume, f + "batchVolume", 1, 64 * 1024 * 1024),
    )


def filters_from_json(value: Any) -> tuple[MessageFilterSpecification, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValidationError("must be an array", "filters")
    out = []
    for i, raw in enumerate(value):
        f = f"filters[{i}]"
        item = _obj(raw, f)
        kind = _str(item, "type", "", f + ".type")
        if kind not in FILTER_TYPES:
            raise ValidationError(f"unknown filter type '{kind}' (use one of: avropath, header, jsonpath)", f + ".type")
        matcher = _str(item, "matcher", "", f + ".matcher")
        try:
            re.compile(matcher)
        except re.error as exc:
            raise ValidationError(f"is not a valid regular expression ({exc})", f + ".matcher") from None
        path = _opt_str(item, "path", f + ".path")
        header = _opt_str(item, "header", f + ".header")
        if kind == "header":
            if not header:
                raise ValidationError("is required for a header filter", f + ".header")
        elif not path or not (JSONPATH if kind == "jsonpath" else AVROPATH).match(path):
            raise ValidationError(f"is not a valid {kind} path", f + ".path")
        elif kind == "jsonpath":
            try:  # the consumers compile it: what their parser refuses would stop the subscription's deliveries
                parse_jsonpath(path)
            except JSONPathError as exc:
                raise ValidationError(f"is not a valid jsonpath path ({exc})", f + ".path") from None
        strategy = _enum(item, "matchingStrategy", MatchingStrategy, MatchingStrategy.ALL, f + ".matchingStrategy")
        out.append(MessageFilterSpecification(kind, matcher, path, header, strategy))
    return tuple(out)


def _headers(value: Any) -> tuple[Header, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValidationError("must be an array", "headers")
    out = []
    for i, raw in enumerate(value):
        item = _obj(raw, f"headers[{i}]")
        name = _str(item, "name", "", f"headers[{i}].name")
        if not name or not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", name):
            raise ValidationError("must be a valid HTTP header name", f"headers[{i}].name")
        value_ = _str(item, "value", "", f"headers[{i}].value")
        if "\r" in value_ or "\n" in value_:
            raise ValidationError("must not contain line breaks", f"headers[{i}].value")
        out.append(Header(name, value_))
    return tuple(out)


def _oauth_policy(value: Any) -> OAuthPolicy | None:
    if value is None:
        return None
    data = _obj(value, "oAuthPolicy")
    grant = _str(data, "grantType", "", "oAuthPolicy.grantType")
    if grant not in ("clientCredentials", "password"):
        raise ValidationError("must be clientCredentials or password", "oAuthPolicy.grantType")
    provider = _str(data, "providerName", "", "oAuthPolicy.providerName")
    if not provider:
        raise ValidationError("is required", "oAuthPolicy.providerName")
    username = _opt_str(data, "username", "oAuthPolicy.username")
    password = _opt_str(data, "password", "oAuthPolicy.password")
    if grant == "password" and (not username or password is None):
        raise ValidationError("username and password are required for the password grant", "oAuthPolicy")
    return OAuthPolicy(grant, provider, _opt_str(data, "scope", "oAuthPolicy.scope"), username, password)


def subscription_from_json(data: Any, topic_name: TopicName) -> Subscription:
    """Parse a subscription in the current or the older (supportTeam, trackingEnabled) request shape."""
    body = _obj(data, "subscription")
    name = validate_simple_name(body.get("name"), "name")  # type: ignore[arg-type]
    declared_topic = body.get("topicName")
    if declared_topic is not None and declared_topic != topic_name.qualified:
        raise ValidationError(f"must match the topic in the path ({topic_name.qualified})", "topicName")
    delivery = _enum(body, "deliveryType", DeliveryType, DeliveryType.SERIAL, "deliveryType")
    policy = _obj(body.get("subscriptionPolicy"), "subscriptionPolicy")
    mode = _enum(body, "mode", SubscriptionMode, SubscriptionMode.ANYCAST, "mode")
    content_type = _enum(body, "contentType", SubscriptionContentType, SubscriptionContentType.JSON, "contentType")
    if "trackingMode" in body:
        tracking = _enum(body, "trackingMode", TrackingMode, TrackingMode.TRACKING_OFF, "trackingMode")
    else:
        tracking = TrackingMode.TRACK_ALL if _bool(body, "trackingEnabled", False) else TrackingMode.TRACKING_OFF
    owner = body.get("owner")
    if owner is None and body.get("supportTeam") is not None:
        owner = {"source": "Plaintext", "id": _str(body, "supportTeam", "")}
    if delivery is DeliveryType.BATCH:
        if mode is SubscriptionMode.BROADCAST:
            raise ValidationError("BROADCAST mode is not available with BATCH delivery", "mode")
        if content_type is SubscriptionContentType.AVRO:
            raise ValidationError("AVRO content type is not available with BATCH delivery", "contentType")
    resolver_metadata = body.get("endpointAddressResolverMetadata") or {}
    if not isinstance(resolver_metadata, dict):
        raise ValidationError("must be a JSON object", "endpointAddressResolverMetadata")
    return Subscription(
        topic_name=topic_name,
        name=name,
        endpoint=EndpointAddress.parse(body.get("endpoint"), "endpoint"),  # type: ignore[arg-type]
        description=_str(body, "description", ""),
        owner=owner_from_json(owner),
        contact=_str(body, "contact", ""),
        state=_enum(body, "state", SubscriptionState, SubscriptionState.ACTIVE, "state"),
        content_type=content_type,
        delivery_type=delivery,
        serial_policy=_serial_policy(policy) if delivery is DeliveryType.SERIAL else SerialSubscriptionPolicy(),
        batch_policy=_batch_policy(policy) if delivery is DeliveryType.BATCH else BatchSubscriptionPolicy(),
        mode=mode,
        headers=_headers(body.get("headers")),
        filters=filters_from_json(body.get("filters")),
        endpoint_address_resolver_metadata=dict(resolver_metadata),
        subscription_identity_headers_enabled=_bool(body, "subscriptionIdentityHeadersEnabled", False),
        tracking_mode=tracking,
        oauth_policy=_oauth_policy(body.get("oAuthPolicy")),
        http2_enabled=_bool(body, "http2Enabled", False),
        auto_delete_with_topic_enabled=_bool(body, "autoDeleteWithTopicEnabled", False),
        monitoring_details=_monitoring_details(body.get("monitoringDetails")),
        profiling_enabled=_bool(body, "profilingEnabled", False),
        profiling_threshold_ms=_int(body, "profilingThresholdMs", 0, "profilingThresholdMs", 0, 3_600_000),
        metrics_config=_metrics_config(body.get("metricsConfig")),
        created_at=_timestamp(body, "createdAt"),
        modified_at=_timestamp(body, "modifiedAt"),
    )


def _monitoring_details(value: Any) -> MonitoringDetails:
    data = _obj(value, "monitoringDetails")
    return MonitoringDetails(
        severity=_enum(data, "severity", Severity, Severity.NON_IMPORTANT, "monitoringDetails.severity"),
        reaction=_str(data, "reaction", "", "monitoringDetails.reaction"),
    )


def _metrics_config(value: Any) -> MessageProcessingMetrics:
    field = "metricsConfig.messageProcessing"
    data = _obj(_obj(value, "metricsConfig").get("messageProcessing"), field)
    thresholds = data.get("thresholdsMilliseconds") or []
    if (
        not isinstance(thresholds, list)
        or len(thresholds) > 10
        or not all(
            isinstance(t, int | float) and not isinstance(t, bool) and t == int(t) and 0 < t <= 3_600_000
            for t in thresholds
        )
    ):
        raise ValidationError("must be at most 10 integers from 1 to 3600000", f"{field}.thresholdsMilliseconds")
    enabled = _bool(data, "enabled", False, f"{field}.enabled")
    return MessageProcessingMetrics(enabled, tuple(int(t) for t in thresholds))


def _policy_to_json(sub: Subscription) -> Json:
    if sub.is_batch:
        b = sub.batch_policy
        return {
            "messageTtl": b.message_ttl,
            "messageBackoff": b.message_backoff,
            "retryClientErrors": b.retry_client_errors,
            "requestTimeout": b.request_timeout,
            "batchSize": b.batch_size,
            "batchTime": b.batch_time,
            "batchVolume": b.batch_volume,
        }
    s = sub.serial_policy
    return {
        "rate": s.rate,
        "messageTtl": s.message_ttl,
        "messageBackoff": s.message_backoff,
        "retryClientErrors": s.retry_client_errors,
        "requestTimeout": s.request_timeout,
        "socketTimeout": s.socket_timeout,
        "inflightSize": s.inflight_size,
        "sendingDelay": s.sending_delay,
        "backoffMultiplier": s.backoff_multiplier,
        "backoffMaxIntervalInSec": s.backoff_max_interval_in_sec,
    }


def _filter_to_json(f: MessageFilterSpecification) -> Json:
    out: Json = {"type": f.type, "matcher": f.matcher, "matchingStrategy": f.matching_strategy.value}
    if f.path is not None:
        out["path"] = f.path
    if f.header is not None:
        out["header"] = f.header
    return out


def subscription_to_json(sub: Subscription, *, mask_secrets: bool = True) -> Json:
    out: Json = {
        "topicName": sub.topic_name.qualified,
        "name": sub.name,
        "endpoint": sub.endpoint.masked if mask_secrets else sub.endpoint.raw,
        "description": sub.description,
        "owner": owner_to_json(sub.owner),
        "contact": sub.contact,
        "state": sub.state.value,
        "contentType": sub.content_type.value,
        "deliveryType": sub.delivery_type.value,
        "subscriptionPolicy": _policy_to_json(sub),
        "mode": sub.mode.value,
        "headers": [{"name": h.name, "value": h.value} for h in sub.headers],
        "filters": [_filter_to_json(f) for f in sub.filters],
        "endpointAddressResolverMetadata": sub.endpoint_address_resolver_metadata,
        "subscriptionIdentityHeadersEnabled": sub.subscription_identity_headers_enabled,
        "trackingMode": sub.tracking_mode.value,
        "trackingEnabled": sub.tracking_enabled,
        "http2Enabled": sub.http2_enabled,
        "autoDeleteWithTopicEnabled": sub.auto_delete_with_topic_enabled,
        "monitoringDetails": {
            "severity": sub.monitoring_details.severity.value,
            "reaction": sub.monitoring_details.reaction,
        },
        "profilingEnabled": sub.profiling_enabled,
        "profilingThresholdMs": sub.profiling_threshold_ms,
        "metricsConfig": {
            "messageProcessing": {
                "thresholdsMilliseconds": list(sub.metrics_config.thresholds_milliseconds),
                "enabled": sub.metrics_config.enabled,
            }
        },
        "createdAt": _seconds(sub.created_at),
        "modifiedAt": _seconds(sub.modified_at),
    }
    if sub.oauth_policy is not None:  # like Hermes, absent rather than null
        p = sub.oauth_policy
        oauth: Json = {"grantType": p.grant_type, "providerName": p.provider_name}
        if p.scope is not None:
            oauth["scope"] = p.scope
        if p.username is not None:
            oauth["username"] = p.username
        if p.password is not None:
            oauth["password"] = SECRET_MASK if mask_secrets else p.password
        out["oAuthPolicy"] = oauth
    return out


# --- OAuth providers ---------------------------------------------------------------------------------


def oauth_provider_from_json(data: Any) -> OAuthProvider:
    body = _obj(data, "oauthProvider")
    name = validate_simple_name(body.get("name"), "name")  # type: ignore[arg-type]
    endpoint = _str(body, "tokenEndpoint", "", "tokenEndpoint")
    EndpointAddress.parse(endpoint, "tokenEndpoint")
    client_id = _str(body, "clientId", "", "clientId")
    secret = _str(body, "clientSecret", "", "clientSecret")
    if not client_id:
        raise ValidationError("is required", "clientId")
    if not secret:
        raise ValidationError("is required", "clientSecret")
    initial = _int(body, "tokenRequestInitialDelay", 1000, "tokenRequestInitialDelay", 1, 3_600_000)
    return OAuthProvider(
        name=name,
        token_endpoint=endpoint,
        client_id=client_id,
        client_secret=secret,
        token_request_initial_delay=initial,
        token_request_max_delay=_int(body, "tokenRequestMaxDelay", 30000, "tokenRequestMaxDelay", initial, 3_600_000),
        request_timeout=_int(body, "requestTimeout", 1000, "requestTimeout", 1, 300_000),
        socket_timeout=_int(body, "socketTimeout", 0, "socketTimeout", 0, 300_000),
    )


def oauth_provider_to_json(provider: OAuthProvider, *, mask_secrets: bool = True) -> Json:
    return {
        "name": provider.name,
        "tokenEndpoint": provider.token_endpoint,
        "clientId": provider.client_id,
        "clientSecret": SECRET_MASK if mask_secrets else provider.client_secret,
        "tokenRequestInitialDelay": provider.token_request_initial_delay,
        "tokenRequestMaxDelay": provider.token_request_max_delay,
        "requestTimeout": provider.request_timeout,
        "socketTimeout": provider.socket_timeout,
    }

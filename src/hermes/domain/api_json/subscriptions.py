"""Subscriptions in Hermes' JSON shape: policies, filters, headers, OAuth policies."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jsonpath_ng.exceptions import JSONPathError
from jsonpath_ng.ext import parse as parse_jsonpath  # type: ignore[attr-defined]

from hermes.domain.api_json.fields import (
    SECRET_MASK,
    Json,
    as_int,
    read_bool,
    read_enum,
    read_float,
    read_int,
    read_object,
    read_objects,
    read_optional_str,
    read_str,
    read_timestamp,
    seconds,
)
from hermes.domain.api_json.retry_rules import retry_rules_from_json, retry_rules_to_json
from hermes.domain.api_json.topics import owner_from_json, owner_to_json
from hermes.domain.endpoint import EndpointAddress
from hermes.domain.names import TopicName, validate_simple_name
from hermes.domain.signing import check_secrets
from hermes.domain.subscription import (
    MAX_MESSAGE_TTL_SECONDS,
    BatchSubscriptionPolicy,
    CircuitBreakerPolicy,
    CloudEventsMode,
    DeliveryType,
    Header,
    MatchingStrategy,
    MessageFilterSpecification,
    MessageProcessingMetrics,
    MonitoringDetails,
    OAuthPolicy,
    Ordering,
    SerialSubscriptionPolicy,
    Severity,
    Subscription,
    SubscriptionMode,
    SubscriptionState,
    TrackingMode,
)
from hermes.domain.topic import (
    ContentType,
)
from hermes.errors import ValidationError

FILTER_TYPES = frozenset({"jsonpath", "avropath", "header"})
JSONPATH = re.compile(r"^\$(\.\.?[A-Za-z0-9_*\-]+|\[[^\]]+\])*$")
AVROPATH = re.compile(r"^(\.[A-Za-z_][A-Za-z0-9_]*(\[(\d+|\*)\])?)+$")


def _serial_policy(data: Mapping[str, Any]) -> SerialSubscriptionPolicy:
    f = "subscriptionPolicy."
    d = SerialSubscriptionPolicy()
    return SerialSubscriptionPolicy(
        rate=read_int(data, "rate", d.rate, f + "rate", 1, 1_000_000),
        message_ttl=read_int(data, "messageTtl", d.message_ttl, f + "messageTtl", 0, MAX_MESSAGE_TTL_SECONDS),
        message_backoff=read_int(data, "messageBackoff", d.message_backoff, f + "messageBackoff", 0, 3_600_000),
        retry_client_errors=read_bool(data, "retryClientErrors", d.retry_client_errors, f + "retryClientErrors"),
        request_timeout=read_int(data, "requestTimeout", d.request_timeout, f + "requestTimeout", 100, 300_000),
        socket_timeout=read_int(data, "socketTimeout", d.socket_timeout, f + "socketTimeout", 0, 300_000),
        inflight_size=None
        if data.get("inflightSize") is None
        else read_int(data, "inflightSize", 0, f + "inflightSize", 1, 10_000),
        sending_delay=read_int(data, "sendingDelay", d.sending_delay, f + "sendingDelay", 0, 5000),
        backoff_multiplier=read_float(data, "backoffMultiplier", d.backoff_multiplier, f + "backoffMultiplier", 1, 10),
        backoff_max_interval_in_sec=read_int(
            data, "backoffMaxIntervalInSec", d.backoff_max_interval_in_sec, f + "backoffMaxIntervalInSec", 1, 600
        ),
        ordering=read_enum(data, "ordering", Ordering, d.ordering, f + "ordering"),
    )


def _batch_policy(data: Mapping[str, Any]) -> BatchSubscriptionPolicy:
    f = "subscriptionPolicy."
    d = BatchSubscriptionPolicy()
    return BatchSubscriptionPolicy(
        message_ttl=read_int(data, "messageTtl", d.message_ttl, f + "messageTtl", 0, MAX_MESSAGE_TTL_SECONDS),
        message_backoff=read_int(data, "messageBackoff", d.message_backoff, f + "messageBackoff", 0, 3_600_000),
        retry_client_errors=read_bool(data, "retryClientErrors", d.retry_client_errors, f + "retryClientErrors"),
        request_timeout=read_int(data, "requestTimeout", d.request_timeout, f + "requestTimeout", 100, 300_000),
        batch_size=read_int(data, "batchSize", d.batch_size, f + "batchSize", 1, 1_000_000),
        batch_time=read_int(data, "batchTime", d.batch_time, f + "batchTime", 1, 3_600_000),
        batch_volume=read_int(data, "batchVolume", d.batch_volume, f + "batchVolume", 1, 64 * 1024 * 1024),
    )


# suspendAfter: at most 30 days (Svix suspends an endpoint failing for five)
MAX_SUSPEND_AFTER_MS = 30 * 24 * 3600 * 1000


def _circuit_breaker(value: Any) -> CircuitBreakerPolicy | None:
    """Absent or null: no breaker."""
    if value is None:
        return None
    data, f, d = read_object(value, "circuitBreaker"), "circuitBreaker.", CircuitBreakerPolicy()
    return CircuitBreakerPolicy(
        consecutive_failures=read_int(
            data, "consecutiveFailures", d.consecutive_failures, f + "consecutiveFailures", 1, 1_000_000
        ),
        failure_ratio=read_float(data, "failureRatio", d.failure_ratio, f + "failureRatio", 0.01, 1),
        window=read_int(data, "window", d.window, f + "window", 1000, 86_400_000),
        minimum_requests=read_int(data, "minimumRequests", d.minimum_requests, f + "minimumRequests", 1, 1_000_000),
        probe_interval=read_int(data, "probeInterval", d.probe_interval, f + "probeInterval", 100, 3_600_000),
        suspend_after=None
        if data.get("suspendAfter") is None
        else read_int(data, "suspendAfter", 0, f + "suspendAfter", 1000, MAX_SUSPEND_AFTER_MS),
    )


def _circuit_breaker_to_json(policy: CircuitBreakerPolicy) -> Json:
    out: Json = {
        "consecutiveFailures": policy.consecutive_failures,
        "failureRatio": policy.failure_ratio,
        "window": policy.window,
        "minimumRequests": policy.minimum_requests,
        "probeInterval": policy.probe_interval,
    }
    if policy.suspend_after is not None:
        out["suspendAfter"] = policy.suspend_after
    return out


def filters_from_json(value: Any) -> tuple[MessageFilterSpecification, ...]:
    out = []
    for f, item in read_objects(value, "filters"):
        kind = read_str(item, "type", "", f + ".type")
        if kind not in FILTER_TYPES:
            raise ValidationError(f"unknown filter type '{kind}' (use one of: avropath, header, jsonpath)", f + ".type")
        matcher = read_str(item, "matcher", "", f + ".matcher")
        try:
            re.compile(matcher)
        except re.error as exc:
            raise ValidationError(f"is not a valid regular expression ({exc})", f + ".matcher") from None
        path = read_optional_str(item, "path", f + ".path")
        header = read_optional_str(item, "header", f + ".header")
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
        strategy = read_enum(item, "matchingStrategy", MatchingStrategy, MatchingStrategy.ALL, f + ".matchingStrategy")
        out.append(MessageFilterSpecification(kind, matcher, path, header, strategy))
    return tuple(out)


def _headers(value: Any) -> tuple[Header, ...]:
    out = []
    for f, item in read_objects(value, "headers"):
        name = read_str(item, "name", "", f + ".name")
        if not name or not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", name):
            raise ValidationError("must be a valid HTTP header name", f + ".name")
        value_ = read_str(item, "value", "", f + ".value")
        if "\r" in value_ or "\n" in value_:
            raise ValidationError("must not contain line breaks", f + ".value")
        out.append(Header(name, value_))
    return tuple(out)


def _oauth_policy(value: Any) -> OAuthPolicy | None:
    if value is None:
        return None
    data = read_object(value, "oAuthPolicy")
    grant = read_str(data, "grantType", "", "oAuthPolicy.grantType")
    if grant not in ("clientCredentials", "password"):
        raise ValidationError("must be clientCredentials or password", "oAuthPolicy.grantType")
    provider = read_str(data, "providerName", "", "oAuthPolicy.providerName")
    if not provider:
        raise ValidationError("is required", "oAuthPolicy.providerName")
    username = read_optional_str(data, "username", "oAuthPolicy.username")
    password = read_optional_str(data, "password", "oAuthPolicy.password")
    if grant == "password" and (not username or password is None):
        raise ValidationError("username and password are required for the password grant", "oAuthPolicy")
    return OAuthPolicy(grant, provider, read_optional_str(data, "scope", "oAuthPolicy.scope"), username, password)


def _signing_secrets(value: Any) -> tuple[str, ...]:
    """A masked secret stands for a stored one (the management service puts those back): here, for nothing."""
    if isinstance(value, list):
        value = [secret for secret in value if secret != SECRET_MASK]
    return check_secrets(value, "signingSecrets")


def subscription_from_json(data: Any, topic_name: TopicName) -> Subscription:
    """Parse a subscription in the current or the older (supportTeam, trackingEnabled) request shape."""
    body = read_object(data, "subscription")
    name = validate_simple_name(body.get("name"), "name")  # type: ignore[arg-type]
    declared_topic = body.get("topicName")
    if declared_topic is not None and declared_topic != topic_name.qualified:
        raise ValidationError(f"must match the topic in the path ({topic_name.qualified})", "topicName")
    delivery = read_enum(body, "deliveryType", DeliveryType, DeliveryType.SERIAL, "deliveryType")
    policy = read_object(body.get("subscriptionPolicy"), "subscriptionPolicy")
    mode = read_enum(body, "mode", SubscriptionMode, SubscriptionMode.ANYCAST, "mode")
    content_type = read_enum(body, "contentType", ContentType, ContentType.JSON, "contentType")
    if "trackingMode" in body:
        tracking = read_enum(body, "trackingMode", TrackingMode, TrackingMode.TRACKING_OFF, "trackingMode")
    else:
        tracking = TrackingMode.TRACK_ALL if read_bool(body, "trackingEnabled", False) else TrackingMode.TRACKING_OFF
    owner = body.get("owner")
    if owner is None and body.get("supportTeam") is not None:
        owner = {"source": "Plaintext", "id": read_str(body, "supportTeam", "")}
    if delivery is DeliveryType.BATCH:
        if mode is SubscriptionMode.BROADCAST:
            raise ValidationError("BROADCAST mode is not available with BATCH delivery", "mode")
        if content_type is ContentType.AVRO:
            raise ValidationError("AVRO content type is not available with BATCH delivery", "contentType")
        if policy.get("ordering") not in (None, Ordering.NONE):
            raise ValidationError("is for SERIAL delivery: a batch is sent in order", "subscriptionPolicy.ordering")
    cloud_events_mode = None
    if body.get("cloudEventsMode") is not None:
        if delivery is DeliveryType.BATCH:
            raise ValidationError(
                "is for SERIAL delivery: BATCH subscriptions receive application/cloudevents-batch+json",
                "cloudEventsMode",
            )
        cloud_events_mode = read_enum(
            body, "cloudEventsMode", CloudEventsMode, CloudEventsMode.BINARY, "cloudEventsMode"
        )
    resolver_metadata = body.get("endpointAddressResolverMetadata") or {}
    if not isinstance(resolver_metadata, dict):
        raise ValidationError("must be a JSON object", "endpointAddressResolverMetadata")
    endpoint = EndpointAddress.parse(body.get("endpoint"), "endpoint")  # type: ignore[arg-type]
    if endpoint.is_jms:  # HTTP's own: a JMS broker takes the endpoint's login, and a message has no signature
        for http_only in ("oAuthPolicy", "signingSecrets"):
            if body.get(http_only):
                raise ValidationError("is not available with a jms:// endpoint", http_only)
    return Subscription(
        topic_name=topic_name,
        name=name,
        endpoint=endpoint,
        description=read_str(body, "description", ""),
        owner=owner_from_json(owner),
        contact=read_str(body, "contact", ""),
        state=read_enum(body, "state", SubscriptionState, SubscriptionState.PENDING, "state"),
        content_type=content_type,
        delivery_type=delivery,
        cloud_events_mode=cloud_events_mode,
        serial_policy=_serial_policy(policy) if delivery is DeliveryType.SERIAL else SerialSubscriptionPolicy(),
        batch_policy=_batch_policy(policy) if delivery is DeliveryType.BATCH else BatchSubscriptionPolicy(),
        retry_rules=retry_rules_from_json(policy, http=not endpoint.is_jms),
        mode=mode,
        headers=_headers(body.get("headers")),
        filters=filters_from_json(body.get("filters")),
        endpoint_address_resolver_metadata=dict(resolver_metadata),
        subscription_identity_headers_enabled=read_bool(body, "subscriptionIdentityHeadersEnabled", False),
        tracking_mode=tracking,
        oauth_policy=_oauth_policy(body.get("oAuthPolicy")),
        http2_enabled=read_bool(body, "http2Enabled", False),
        auto_delete_with_topic_enabled=read_bool(body, "autoDeleteWithTopicEnabled", False),
        monitoring_details=_monitoring_details(body.get("monitoringDetails")),
        profiling_enabled=read_bool(body, "profilingEnabled", False),
        profiling_threshold_ms=read_int(body, "profilingThresholdMs", 0, "profilingThresholdMs", 0, 3_600_000),
        metrics_config=_metrics_config(body.get("metricsConfig")),
        circuit_breaker=_circuit_breaker(body.get("circuitBreaker")),
        signing_secrets=_signing_secrets(body.get("signingSecrets")),
        previous_secret_expires_at=read_timestamp(body, "previousSigningSecretExpiresAt"),
        created_at=read_timestamp(body, "createdAt"),
        modified_at=read_timestamp(body, "modifiedAt"),
    )


def _monitoring_details(value: Any) -> MonitoringDetails:
    data = read_object(value, "monitoringDetails")
    return MonitoringDetails(
        severity=read_enum(data, "severity", Severity, Severity.NON_IMPORTANT, "monitoringDetails.severity"),
        reaction=read_str(data, "reaction", "", "monitoringDetails.reaction"),
    )


def _metrics_config(value: Any) -> MessageProcessingMetrics:
    field = "metricsConfig.messageProcessing"
    data = read_object(read_object(value, "metricsConfig").get("messageProcessing"), field)
    thresholds = data.get("thresholdsMilliseconds") or []
    if not isinstance(thresholds, list) or len(thresholds) > 10:
        raise ValidationError("must be at most 10 integers from 1 to 3600000", f"{field}.thresholdsMilliseconds")
    millis = tuple(as_int(t, f"{field}.thresholdsMilliseconds[{i}]", 1, 3_600_000) for i, t in enumerate(thresholds))
    return MessageProcessingMetrics(read_bool(data, "enabled", False, f"{field}.enabled"), millis)


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
    policy: Json = {
        "rate": s.rate,
        "messageTtl": s.message_ttl,
        "messageBackoff": s.message_backoff,
        "retryClientErrors": s.retry_client_errors,
        "requestTimeout": s.request_timeout,
        "socketTimeout": s.socket_timeout,
        "sendingDelay": s.sending_delay,
        "backoffMultiplier": s.backoff_multiplier,
        "backoffMaxIntervalInSec": s.backoff_max_interval_in_sec,
    }
    if s.inflight_size is not None:  # as Hermes, which leaves null fields out
        policy["inflightSize"] = s.inflight_size
    if s.ordering is not Ordering.NONE:
        policy["ordering"] = s.ordering.value
    return policy


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
        "subscriptionPolicy": {**_policy_to_json(sub), **retry_rules_to_json(sub.retry_rules)},
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
        "createdAt": seconds(sub.created_at),
        "modifiedAt": seconds(sub.modified_at),
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
    if sub.signing_secrets:  # our extension: absent unless used, so Hermes' shape is unchanged
        out["signingSecrets"] = [SECRET_MASK] * len(sub.signing_secrets) if mask_secrets else list(sub.signing_secrets)
    if sub.cloud_events_mode is not None:
        out["cloudEventsMode"] = sub.cloud_events_mode.value
    if sub.circuit_breaker is not None:
        out["circuitBreaker"] = _circuit_breaker_to_json(sub.circuit_breaker)
    if sub.previous_secret_expires_at:
        out["previousSigningSecretExpiresAt"] = seconds(sub.previous_secret_expires_at)
    return out

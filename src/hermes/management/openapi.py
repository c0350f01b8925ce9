"""The OpenAPI 3.1 document of the management API, served at ``/openapi.json``.

Field lists follow ``hermes.domain.codec``; a test checks that every route of the application is described
here and that the API's responses validate against these schemas.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

_STR: Schema = {"type": "string"}
_INT: Schema = {"type": "integer"}
_NUM: Schema = {"type": "number"}
_BOOL: Schema = {"type": "boolean"}
_NULLABLE_INT: Schema = {"type": ["integer", "null"]}
_NAMES: Schema = {"type": "array", "items": _STR}
_OWNER: Schema = {"type": "object", "properties": {"source": _STR, "id": _STR}, "required": ["source", "id"]}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    return {"type": "object", "properties": properties, "required": required or list(properties)}


SCHEMAS: dict[str, Schema] = {
    "Error": _object({"message": _STR, "code": _STR}),
    "Group": _object({"groupName": _STR}),
    "Topic": _object(
        {
            "name": _STR,
            "description": _STR,
            "owner": _OWNER,
            "contentType": {"enum": ["JSON", "AVRO"]},
            "ack": {"enum": ["LEADER", "ALL"]},
            "retentionTime": _object(
                {"duration": _INT, "retentionUnit": {"enum": ["SECONDS", "MINUTES", "HOURS", "DAYS"]}}
            ),
            "trackingEnabled": _BOOL,
            "maxMessageSize": _INT,
            "offlineStorage": _object(
                {"enabled": _BOOL, "retentionTime": _object({"duration": _INT, "infinite": _BOOL})}
            ),
            "subscribingRestricted": _BOOL,
            "createdAt": _INT,
            "modifiedAt": _INT,
        }
    ),
    "Subscription": _object(
        {
            "topicName": _STR,
            "name": _STR,
            "endpoint": _STR,
            "description": _STR,
            "owner": _OWNER,
            "contact": _STR,
            "state": {"enum": ["PENDING", "ACTIVE", "SUSPENDED"]},
            "contentType": {"enum": ["JSON", "AVRO"]},
            "deliveryType": {"enum": ["SERIAL", "BATCH"]},
            "subscriptionPolicy": {"type": "object"},
            "mode": {"enum": ["ANYCAST", "BROADCAST"]},
            "headers": {"type": "array", "items": _object({"name": _STR, "value": _STR})},
            "filters": {
                "type": "array",
                "items": _object({"type": _STR, "matcher": _STR, "matchingStrategy": _STR}, ["type", "matcher"]),
            },
            "endpointAddressResolverMetadata": {"type": "object"},
            "subscriptionIdentityHeadersEnabled": _BOOL,
            "trackingMode": {"enum": ["trackingAll", "discardedOnly", "trackingOff"]},
            "trackingEnabled": _BOOL,
            "oAuthPolicy": {"type": ["object", "null"]},
            "http2Enabled": _BOOL,
            "autoDeleteWithTopicEnabled": _BOOL,
            "createdAt": _INT,
            "modifiedAt": _INT,
        }
    ),
    "OAuthProvider": _object(
        {
            "name": _STR,
            "tokenEndpoint": _STR,
            "clientId": _STR,
            "clientSecret": {"const": "******"},
            "tokenRequestInitialDelay": _INT,
            "tokenRequestMaxDelay": _INT,
            "requestTimeout": _INT,
            "socketTimeout": _INT,
        }
    ),
    "SubscriptionMetrics": _object(
        {
            "delivered": _INT,
            "discarded": _INT,
            "inflight": _INT,
            "timeouts": _NUM,
            "otherErrors": _NUM,
            "codes2xx": _NUM,
            "codes4xx": _NUM,
            "codes5xx": _NUM,
            "rate": _NUM,
            "maxRate": _NUM,
            "lag": _INT,
            "totals": {"type": "object", "additionalProperties": _INT},
        }
    ),
    "TopicMetrics": _object(
        {
            "published": _INT,
            "rate": _NUM,
            "subscriptions": _INT,
            "delivered": _INT,
            "discarded": _INT,
            "deliveryRate": _NUM,
        }
    ),
    "Health": _object(
        {
            "status": {"enum": ["HEALTHY", "UNHEALTHY"]},
            "problems": {"type": "array", "items": _object({"code": _STR, "description": _STR})},
        }
    ),
    "Unhealthy": {
        "type": "array",
        "items": _object({"name": _STR, "qualifiedTopicName": _STR, "problems": {"type": "array"}}),
    },
    "UndeliveredMessage": _object(
        {
            "timestamp": _INT,
            "subscription": _STR,
            "topicName": _STR,
            "status": _STR,
            "reason": _STR,
            "message": _STR,
            "partition": _INT,
            "offset": _INT,
            "cluster": _STR,
        }
    ),
    "RetransmissionSummary": _object(
        {
            "partitionOffsetListPerBrokerName": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "items": _object({"partition": _INT, "offset": _INT, "oldestAvailable": _BOOL}),
                },
            }
        }
    ),
    "TraceEvent": _object(
        {
            "messageId": _STR,
            "timestamp": _INT,
            "subscription": _STR,
            "topicName": _STR,
            "status": {"enum": ["INFLIGHT", "SUCCESS", "FAILED", "DISCARDED"]},
            "reason": _STR,
            "partition": _INT,
            "offset": _INT,
            "cluster": _STR,
            "publishTimestamp": _INT,
        },
        ["messageId", "timestamp", "topicName", "status", "cluster"],
    ),
    "DeliveryStatistics": _object(
        {
            "minute": _INT,
            "delivered": _INT,
            "discarded": _INT,
            "failedAttempts": _INT,
            "latency": _object(
                {"p50": _NULLABLE_INT, "p90": _NULLABLE_INT, "p99": _NULLABLE_INT, "max": _NULLABLE_INT}
            ),
        }
    ),
    "OfflineRetransmissionTask": _object(
        {
            "taskId": _STR,
            "type": {"const": "TOPIC"},
            "sourceTopic": _STR,
            "targetTopic": _STR,
            "startTimestamp": _STR,
            "endTimestamp": _STR,
            "createdAt": _STR,
            "status": {"enum": ["PENDING", "RUNNING", "DONE", "FAILED"]},
            "progress": _object({"republished": _INT, "total": _NULLABLE_INT}),
            "error": _STR,
        },
        [
            "taskId",
            "type",
            "sourceTopic",
            "targetTopic",
            "startTimestamp",
            "endTimestamp",
            "createdAt",
            "status",
            "progress",
        ],
    ),
    "SchemaVersion": _object({"version": _INT}),
    "Status": _object({"status": _STR}),
}


def _array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def _op(
    summary: str,
    ok: int = 200,
    body: Schema | None = None,
    request: Schema | None = None,
    errors: tuple[int, ...] = (400, 404, 409, 503),
) -> Schema:
    responses: dict[str, Any] = {
        str(ok): {"description": "OK", **({"content": {"application/json": {"schema": body}}} if body else {})}
    }
    for status in errors:
        responses[str(status)] = {"description": "Error", "content": {"application/json": {"schema": _ref("Error")}}}
    op: Schema = {"summary": summary, "responses": responses}
    if request is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": request}}}
    return op


_ANY: Schema = {}
_T = "/topics/{topic}"
_S = "/topics/{topic}/subscriptions/{subscription}"

PATHS: dict[str, dict[str, Schema]] = {
    "/status/health": {"get": _op("Health", body=_ref("Status"), errors=())},
    "/status/ready": {"get": _op("Readiness", body=_ref("Status"), errors=())},
    "/status/prometheus": {"get": _op("Prometheus metrics", errors=())},
    "/openapi.json": {"get": _op("This document", errors=())},
    "/groups": {
        "get": _op("List groups", body=_NAMES),
        "post": _op("Create a group", 201, _ref("Group"), _ref("Group")),
    },
    "/groups/{group}": {"get": _op("Get a group", body=_ref("Group")), "delete": _op("Delete an empty group")},
    "/topics": {
        "get": _op("List topics (?groupName=)", body=_NAMES),
        "post": _op("Create a topic (AVRO topics may carry a schema)", 201, _ref("Topic"), _ANY),
    },
    _T: {
        "get": _op("Get a topic", body=_ref("Topic")),
        "put": _op("Update the fields sent", body=_ref("Topic"), request=_ANY),
        "delete": _op("Delete a topic without subscriptions"),
    },
    _T + "/metrics": {"get": _op("Topic metrics", body=_ref("TopicMetrics"))},
    _T + "/schema": {
        "get": _op("Latest Avro schema", body=_ANY),
        "post": _op("Add a schema version", 201, _ref("SchemaVersion"), _ANY),
    },
    _T + "/schema/versions": {"get": _op("Schema versions", body={"type": "array", "items": _INT})},
    _T + "/schema/versions/{version}": {"get": _op("One schema version", body=_ANY)},
    _T + "/subscriptions": {
        "get": _op("List subscriptions", body=_NAMES),
        "post": _op("Create a subscription", 201, _ref("Subscription"), _ANY),
    },
    _S: {
        "get": _op("Get a subscription", body=_ref("Subscription")),
        "put": _op("Update the fields sent", body=_ref("Subscription"), request=_ANY),
        "delete": _op("Delete a subscription"),
    },
    _S + "/state": {
        "get": _op("State", body=_STR),
        "put": _op('Set "ACTIVE" or "SUSPENDED"', request=_STR),
        "post": _op('Set "ACTIVE" or "SUSPENDED" (older form)', request=_STR),
    },
    _S + "/metrics": {"get": _op("Subscription metrics", body=_ref("SubscriptionMetrics"))},
    _S + "/health": {"get": _op("Subscription health", body=_ref("Health"))},
    _S + "/undelivered/last": {"get": _op("Last undelivered message", body=_ref("UndeliveredMessage"))},
    _S + "/retransmission": {
        "put": _op(
            "Retransmit from a date", body=_ref("RetransmissionSummary"), request=_object({"retransmissionDate": _STR})
        ),
        "post": _op(
            "Retransmit from an ISO date or -6h (older form)", body=_ref("RetransmissionSummary"), request=_ANY
        ),
    },
    _S + "/events/{messageId}/trace": {
        "get": _op("The message's trace events in time order (tracking)", body=_array(_ref("TraceEvent")))
    },
    _S + "/undelivered": {
        "get": _op("The last 100 undelivered messages, newest first (tracking)", body=_array(_ref("TraceEvent")))
    },
    _S + "/statistics": {
        "get": _op(
            "Per-minute delivery statistics of the last ?minutes= (default 60; tracking; an addition)",
            body=_array(_ref("DeliveryStatistics")),
        )
    },
    "/unhealthy": {"get": _op("Unhealthy subscriptions", body=_ref("Unhealthy"))},
    "/offline-retransmission/tasks": {
        "get": _op(
            "Offline retransmission tasks with status and progress", body=_array(_ref("OfflineRetransmissionTask"))
        ),
        "post": _op(
            "Republish a time range of a topic's offline storage to a topic",
            201,
            _ref("OfflineRetransmissionTask"),
            _object({"sourceTopic": _STR, "targetTopic": _STR, "startTimestamp": _STR, "endTimestamp": _STR}),
        ),
    },
    "/offline-retransmission/tasks/{taskId}": {"delete": _op("Delete a task (a running one stops)")},
    "/oauth/providers": {
        "get": _op("List OAuth providers", body=_NAMES),
        "post": _op("Register an OAuth provider", 201, _ref("OAuthProvider"), _ANY),
    },
    "/oauth/providers/{provider}": {
        "get": _op("Get a provider", body=_ref("OAuthProvider")),
        "put": _op("Update the fields sent", body=_ref("OAuthProvider"), request=_ANY),
        "delete": _op("Delete a provider"),
    },
}


def document() -> Schema:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Hermes management API",
            "version": "1.0",
            "description": "Groups, topics, subscriptions, OAuth providers and operations; Hermes-compatible.",
        },
        "paths": PATHS,
        "components": {"schemas": SCHEMAS},
    }

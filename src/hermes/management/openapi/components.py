"""The schemas of every body the management API answers or accepts: the entities and the rest."""

from __future__ import annotations

from hermes.management.openapi.schemas import (
    ANY,
    BOOL,
    ENTITIES,
    INT,
    NULLABLE_INT,
    NUM,
    STR,
    SUBSCRIPTION_NAME,
    TOPIC_NAME,
    Schema,
    array,
    enum,
    obj,
    ranged,
    ref,
)

DECIMAL: Schema = {"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]+)?$|^unavailable$"}

_NUMERIC = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"
_SCALAR: Schema = {"type": ["string", "number", "boolean", "null"]}
# operators are matched ignoring case, as Hermes matches them
_OPERATION: Schema = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": 1,
    "patternProperties": {
        "^(?i:eq|ne)$": _SCALAR,
        "^(?i:like)$": {**_SCALAR, "format": "regex"},
        "^(?i:in)$": array(_SCALAR),
        "^(?i:gt|lt)$": {"anyOf": [NUM, {"type": "string", "pattern": _NUMERIC}]},
    },
    "additionalProperties": False,
}
# an operator where an attribute is expected (and, or, not are only themselves in lower case)
_MISPLACED_OPERATOR = "^(?i:eq|ne|like|in|gt|lt)$|^(?!(?:and|or|not)$)(?i:and|or|not)$"

# Hermes' topic metrics: TopicMetrics (with our lifetime counts) and the query's TopicNameWithMetrics
_TOPIC_METRICS: dict[str, Schema] = {
    "published": INT,
    "volume": INT,
    "rate": DECIMAL,
    "deliveryRate": DECIMAL,
    "subscriptions": INT,
    "throughput": DECIMAL,
}


def _as_stored(entity: str) -> Schema:
    """A topic or subscription as a GET answers it: one stored that fails today's validation comes as stored
    (secrets masked), whatever it holds, with our extension field ``invalid``; any other is ``entity``. Only
    answers carry ``invalid``: requests use ``entity``, which lacks it."""
    return {
        "type": "object",
        "properties": {"invalid": ref("StoredEntityInvalid")},
        "if": {"required": ["invalid"]},
        "else": ref(entity),
    }


SCHEMAS: dict[str, Schema] = {
    **ENTITIES,
    "StoredEntityInvalid": {
        **obj({"field": {"type": ["string", "null"]}, "message": STR}),
        "description": "our extension: why the topic or subscription as stored fails today's validation (stored by "
        "an older version, or edited in the store); no role serves it until a PUT corrects it",
    },
    "TopicAsStored": _as_stored("Topic"),
    "SubscriptionAsStored": _as_stored("Subscription"),
    "Redrive": obj(
        {
            "id": STR,
            "subscription": SUBSCRIPTION_NAME,
            "status": enum("PENDING", "RUNNING", "DONE"),
            "createdAt": INT,
            "updatedAt": INT,
            "finishedAt": NULLABLE_INT,
            "start": {**INT, "description": "the first dead-letter id it covers"},
            "end": {**INT, "description": "one past the last dead-letter id it covers (the end when it was asked)"},
            "position": {**INT, "description": "every dead letter below it is done with"},
            "from": NULLABLE_INT,
            "to": NULLABLE_INT,
            "ids": {"type": ["array", "null"], "items": STR},
            "redriven": INT,
            "runner": {"type": ["string", "null"], "description": "the consumer node running it"},
        }
    ),
    "DeadLetter": obj(
        {
            "id": {"type": "string", "description": "its offset in the subscription's dead-letter topic"},
            "messageId": STR,
            "reason": STR,
            "lastStatus": {**NULLABLE_INT, "description": "the last HTTP status answered (null: none, e.g. timeouts)"},
            "attempts": INT,
            "timestamp": {**INT, "description": "when it was discarded, epoch milliseconds"},
            "topicName": TOPIC_NAME,
            "partition": INT,
            "offset": INT,
            "headers": {"type": "object", "additionalProperties": STR, "description": "its original Kafka headers"},
            "body": STR,
            "bodyEncoding": enum("utf-8", "base64"),
            "offloaded": {**BOOL, "description": "the body is the placeholder of an offloaded message"},
            "key": STR,
            "keyEncoding": enum("utf-8", "base64"),
        },
        [
            "id",
            "messageId",
            "reason",
            "lastStatus",
            "attempts",
            "timestamp",
            "topicName",
            "partition",
            "offset",
            "headers",
            "body",
            "bodyEncoding",
            "offloaded",
        ],
    ),
    "SubscriptionMetrics": obj(
        {
            "delivered": INT,
            "discarded": INT,
            "volume": INT,
            "timeouts": DECIMAL,
            "otherErrors": DECIMAL,
            "codes2xx": DECIMAL,
            "codes4xx": DECIMAL,
            "codes5xx": DECIMAL,
            "retries": DECIMAL,
            "lag": {"type": "string", "pattern": "^-?[0-9]+$|^unavailable$"},
            "state": enum("PENDING", "ACTIVE", "SUSPENDED"),
            "rate": DECIMAL,
            "throughput": DECIMAL,
            "batchRate": DECIMAL,
            "inflight": INT,
            "maxRate": NUM,
            "totals": {"type": "object", "additionalProperties": INT},
            "nodes": array(STR),
        }
    ),
    "PersistentSubscriptionMetrics": obj({"delivered": INT, "discarded": INT, "volume": INT}),
    "TopicMetrics": obj({**_TOPIC_METRICS, "delivered": INT, "discarded": INT}),
    "TopicNameWithMetrics": obj({"name": STR, **_TOPIC_METRICS}),
    "SubscriptionNameWithMetrics": obj(
        {
            "topicName": STR,
            "name": STR,
            "delivered": INT,
            "discarded": INT,
            "volume": INT,
            "timeouts": DECIMAL,
            "lag": STR,
            "rate": DECIMAL,
            "throughput": DECIMAL,
        }
    ),
    "Health": obj(
        {
            "status": enum("HEALTHY", "UNHEALTHY", "NO_DATA"),
            "problems": array(obj({"code": STR, "description": STR})),
        }
    ),
    "CircuitBreaker": obj(
        {
            "enabled": BOOL,
            "state": enum("CLOSED", "OPEN", "HALF_OPEN"),
            "nodes": array(
                obj(
                    {
                        "node": STR,
                        "state": enum("CLOSED", "OPEN", "HALF_OPEN"),
                        "opened": {**INT, "description": "times it opened since the node's consumer started"},
                        "since": {**INT, "description": "epoch millis it opened (0: closed)"},
                        "reason": STR,
                    }
                )
            ),
        }
    ),
    "Unhealthy": array(
        obj(
            {
                "name": STR,
                "topicName": STR,
                "severity": enum("CRITICAL", "IMPORTANT", "NON_IMPORTANT"),
                "problems": array(obj({"code": STR, "description": STR})),
            }
        )
    ),
    "ConsumerGroup": obj(
        {
            "clusterName": STR,
            "groupId": STR,
            "state": enum("Unknown", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty"),
            "members": array(
                obj(
                    {
                        "consumerId": STR,
                        "clientId": STR,
                        "host": STR,
                        "partitions": array(
                            obj(
                                {
                                    "partition": INT,
                                    "topic": STR,
                                    "currentOffset": INT,
                                    "logEndOffset": INT,
                                    "lag": INT,
                                    "offsetMetadata": STR,
                                    "contentType": enum("JSON", "AVRO"),
                                }
                            )
                        ),
                    }
                )
            ),
        }
    ),
    "UndeliveredMessage": obj(
        {
            "timestamp": INT,
            "subscription": STR,
            "topicName": STR,
            "status": STR,
            "reason": STR,
            "message": STR,
            "partition": INT,
            "offset": INT,
            "cluster": STR,
        }
    ),
    "RetransmissionSummary": obj(
        {
            "partitionOffsetListPerBrokerName": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "items": obj({"partition": INT, "offset": INT, "oldestAvailable": BOOL}),
                },
            }
        }
    ),
    "TraceEvent": obj(
        {
            "messageId": STR,
            "timestamp": INT,
            "subscription": STR,
            "topicName": STR,
            "status": {"enum": ["INFLIGHT", "SUCCESS", "FAILED", "DISCARDED"]},
            "reason": STR,
            "partition": INT,
            "offset": INT,
            "cluster": STR,
            "publishTimestamp": INT,
        },
        ["messageId", "timestamp", "topicName", "status", "cluster"],
    ),
    "DeliveryStatistics": obj(
        {
            "minute": INT,
            "delivered": INT,
            "discarded": INT,
            "failedAttempts": INT,
            "latency": obj({"p50": NULLABLE_INT, "p90": NULLABLE_INT, "p99": NULLABLE_INT, "max": NULLABLE_INT}),
        }
    ),
    "OfflineRetransmissionTask": obj(
        {
            "taskId": STR,
            "type": {"const": "TOPIC"},
            "sourceTopic": STR,
            "targetTopic": STR,
            "startTimestamp": STR,
            "endTimestamp": STR,
            "createdAt": STR,
            "status": {"enum": ["PENDING", "RUNNING", "DONE", "FAILED"]},
            "progress": obj({"republished": INT, "total": NULLABLE_INT}),
            "error": STR,
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
    "SchemaVersion": obj({"version": INT}),
    "Query": obj({"query": ref("QueryConditions")}),
    "QueryConditions": {
        "type": "object",
        "description": "all must hold: attribute: value, attribute: {operator: operand}, and/or: [...], not: {...}",
        "properties": {
            "and": array(ref("QueryConditions")),
            "or": array(ref("QueryConditions")),
            "not": {**ref("QueryConditions"), "minProperties": 1, "maxProperties": 1},
        },
        "propertyNames": {"not": {"pattern": _MISPLACED_OPERATOR}},
        "additionalProperties": {"anyOf": [_SCALAR, _OPERATION]},
    },
    "SearchResults": obj(
        {
            "results": array(
                obj(
                    {"type": enum("TOPIC", "SUBSCRIPTION"), "name": STR, "topic": ANY, "subscription": ANY},
                    ["type", "name"],
                )
            ),
            "totalCount": INT,
        }
    ),
    "Stats": obj(
        {
            "topicStats": obj(
                {"topicCount": INT, "ackAllTopicCount": INT, "trackingEnabledTopicCount": INT, "avroTopicCount": INT}
            ),
            "subscriptionStats": obj(
                {"subscriptionCount": INT, "trackingEnabledSubscriptionCount": INT, "avroSubscriptionCount": INT}
            ),
        }
    ),
    "OwnerSource": obj({"name": STR, "autocomplete": BOOL, "deprecated": BOOL}),
    "FiltersVerification": obj(
        {
            "filters": array(ENTITIES["Subscription"]["properties"]["filters"]["items"]),
            "message": {
                "type": "string",
                "contentEncoding": "base64",
                "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
            },
        },
        ["message"],
    ),
    "FiltersVerificationResult": obj(
        {"status": enum("MATCHED", "NOT_MATCHED", "ERROR"), "errorMessage": STR}, ["status"]
    ),
    "MessagePreview": obj({"content": STR, "truncated": BOOL}),
    "Readiness": obj({"isReady": BOOL}),
    "DatacenterReadiness": obj({"datacenter": STR, "status": enum("READY", "NOT_READY")}),
    "Constraints": obj({"consumersNumber": ranged(1, 10_000, nullable=False), "reason": STR}, ["consumersNumber"]),
    "TopicConstraints": obj({"topicName": TOPIC_NAME, "constraints": ref("Constraints")}),
    "SubscriptionConstraints": obj({"subscriptionName": SUBSCRIPTION_NAME, "constraints": ref("Constraints")}),
    "WorkloadConstraints": obj(
        {
            "topicConstraints": {"type": "object", "additionalProperties": ref("Constraints")},
            "subscriptionConstraints": {"type": "object", "additionalProperties": ref("Constraints")},
        }
    ),
    "InactiveTopic": obj({"topic": STR, "lastPublishedTsMs": INT, "notificationTsMs": array(INT), "whitelisted": BOOL}),
    "RetransmissionTaskMonitoring": obj(
        {
            "type": STR,
            "taskId": STR,
            "logsUrl": STR,
            "metricsUrl": STR,
            "jobDetailsUrl": STR,
            "status": enum("PENDING", "RUNNING", "DONE", "FAILED"),
            "progress": obj({"republished": INT, "total": NULLABLE_INT}),
        }
    ),
    "Owner": obj({"id": STR, "name": STR}),
    # "DOWN" (503) while a part of the process is down, each named in problems (the embedded broker, docs/broker.md)
    "Status": obj({"status": enum("UP", "DOWN"), "problems": array(STR)}, ["status"]),
    "ConsoleConfiguration": obj(
        {
            key: {"type": "object"}
            for key in (
                "console",
                "dashboard",
                "metrics",
                "auth",
                "owner",
                "topic",
                "subscription",
                "consistency",
                "group",
                "costs",
            )
        }
    ),
}

"""JSON schemas of the management API's bodies, with the constraints ``hermes.domain.api_json`` enforces.

Request bodies use the same schemas as responses: Hermes' clients send back what they read. Properties that
are not listed here are ignored by the API (and named in ``Hermes-Ignored-Fields``).
"""

from __future__ import annotations

from typing import Any

from hermes.domain.api_json.fields import SECRET_MASK
from hermes.domain.api_json.subscriptions import AVROPATH, JSONPATH, MAX_SUSPEND_AFTER_MS
from hermes.domain.api_json.topics import MAX_CHAOS_DELAY_MS, MAX_MAX_MESSAGE_SIZE, MIN_MAX_MESSAGE_SIZE
from hermes.domain.endpoint import ENDPOINT_PATTERN, URL_PATTERN
from hermes.domain.names import GROUP_PATTERN, SIMPLE_PATTERN, TOPIC_NAME_PATTERN
from hermes.domain.retry_rules import MAX_RULE_DELAY_MS, MAX_STATUS_RULES, STATUS_PATTERN, STOP_RETRY_HEADER
from hermes.domain.signing import MAX_SECRETS, SECRET_PATTERN
from hermes.domain.subscription import MAX_MESSAGE_TTL_SECONDS
from hermes.domain.topic import MAX_IDEMPOTENCY_WINDOW

Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
NULLABLE_INT: Schema = {"type": ["integer", "null"]}
NAMES: Schema = {"type": "array", "items": STR}
ANY: Schema = {}
GROUP_NAME: Schema = {"type": "string", "pattern": f"^{GROUP_PATTERN}$"}
SIMPLE_NAME: Schema = {"type": "string", "pattern": f"^{SIMPLE_PATTERN}$"}
TOPIC_NAME: Schema = {"type": "string", "pattern": TOPIC_NAME_PATTERN, "description": "group.topic"}
SUBSCRIPTION_NAME: Schema = {"type": "string", "pattern": f"^{GROUP_PATTERN}\\.{SIMPLE_PATTERN}\\${SIMPLE_PATTERN}$"}
HTTP_URL: Schema = {"type": "string", "pattern": URL_PATTERN}
ENDPOINT: Schema = {"type": "string", "pattern": ENDPOINT_PATTERN, "description": "http(s):// or jms://"}
REGEX: Schema = {"type": "string", "format": "regex"}
EPOCH_SECONDS: Schema = {"type": "number", "minimum": 0}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def obj(properties: dict[str, Schema], required: list[str] | None = None) -> Schema:
    """An object with these properties; all of them required unless ``required`` says otherwise."""
    return {"type": "object", "properties": properties, "required": list(properties) if required is None else required}


def enum(*values: str) -> Schema:
    return {"type": "string", "enum": list(values)}


def ranged(lo: int, hi: int | None = None, nullable: bool = True) -> Schema:
    """A body's whole number: as in Hermes, a string of its decimal digits ("2") is taken for it too; null, as
    absent, takes its default (``api_json.fields.read_int``)."""
    kind = ["integer", "null"] if nullable else "integer"
    bounds = {"minimum": lo, **({"maximum": hi} if hi is not None else {})}
    return {"type": kind, **bounds, "description": 'a JSON string of the integer ("2") is accepted too'}


# a request's owner names one (api_json.check_owner_named): some character that is not blank
_OWNER_ID: Schema = {"type": "string", "pattern": r"\S"}
OWNER = {**obj({"source": STR, "id": _OWNER_ID}, ["id"]), "description": "source defaults to Plaintext"}
_CHAOS_POLICY = obj(
    {
        "probability": ranged(0, 100),
        "delayFrom": ranged(0, MAX_CHAOS_DELAY_MS),
        "delayTo": ranged(0, MAX_CHAOS_DELAY_MS),
        "completeWithError": BOOL,
    },
    [],
)

_STATUS_RULE: Schema = {
    **obj(
        {
            "status": {
                "anyOf": [
                    {"type": "string", "pattern": STATUS_PATTERN},
                    {"type": "integer", "minimum": 100, "maximum": 599},
                ],
                "description": 'a status ("409"), a range ("400-499") or a class ("5xx"), from 100 to 599; a rule '
                "matching only statuses that a 2xx or earlier rules take is refused",
            },
            "action": enum("RETRY", "RETRY_AFTER", "DISCARD", "DEAD_LETTER"),
            "delay": {**ranged(0, MAX_RULE_DELAY_MS), "description": "millis before the retry, for RETRY_AFTER"},
        },
        ["status", "action"],
    ),
    "if": {"properties": {"action": {"const": "RETRY_AFTER"}}},
    "then": {"required": ["delay"], "properties": {"delay": {"type": ["integer", "string"]}}},
    "else": {"properties": {"delay": {"type": "null"}}},
}
# Our extension of either policy (hermes.domain.retry_rules): each left out of the answer at its default
_RETRY_RULES: dict[str, Schema] = {
    "statusRules": {
        "type": ["array", "null"],
        "items": _STATUS_RULE,
        "maxItems": MAX_STATUS_RULES,
        "description": "our extension: the first rule matching a failed answer's status decides; other statuses "
        "follow Hermes' table (HTTP endpoints only)",
    },
    "backoffJitter": {
        "type": ["string", "null"],
        "enum": ["NONE", "FULL", "EQUAL", None],
        "description": "our extension: FULL waits uniform 0..backoff, EQUAL backoff/2 + uniform 0..backoff/2",
    },
    "stopRetryHeaderAllowed": {
        **BOOL,
        "description": f"our extension: a failed answer with '{STOP_RETRY_HEADER}: stop' ends the message's retries",
    },
}

SERIAL_POLICY = obj(
    {
        "rate": ranged(1, 1_000_000),
        "messageTtl": ranged(0, MAX_MESSAGE_TTL_SECONDS),
        "messageBackoff": ranged(0, 3_600_000),
        "retryClientErrors": BOOL,
        "requestTimeout": ranged(100, 300_000),
        "socketTimeout": ranged(0, 300_000),
        "inflightSize": ranged(1, 10_000),
        "sendingDelay": ranged(0, 5000),
        "backoffMultiplier": {"type": "number", "minimum": 1, "maximum": 10},
        "backoffMaxIntervalInSec": ranged(1, 600),
        "ordering": {
            "type": ["string", "null"],
            "enum": ["NONE", "KEY", None],
            "description": "our extension: KEY delivers messages with the same Partition-Key one after another, "
            "other keys in parallel up to inflightSize (unset: NONE, and not answered)",
        },
        **_RETRY_RULES,
        "retryParking": {
            **obj({"thresholdMs": ranged(0, 3_600_000)}, []),
            "type": ["object", "null"],
            "description": "our extension: a message whose next attempt is more than thresholdMs (default 30000) "
            "away waits in the subscription's retry topic, so its partition moves on; ANYCAST, without ordering "
            "KEY (unset or null: off, and not answered)",
        },
    },
    [],
)
BATCH_POLICY = obj(
    {
        "messageTtl": ranged(0, MAX_MESSAGE_TTL_SECONDS),
        "messageBackoff": ranged(0, 3_600_000),
        "retryClientErrors": BOOL,
        "requestTimeout": ranged(100, 300_000),
        "batchSize": ranged(1, 1_000_000),
        "batchTime": ranged(1, 3_600_000),
        "batchVolume": ranged(1, 64 * 1024 * 1024),
        "ordering": {"type": ["string", "null"], "enum": ["NONE", None], "description": "KEY is for SERIAL delivery"},
        **_RETRY_RULES,
        "retryParking": {"type": "null", "description": "for SERIAL delivery"},
    },
    [],
)

_STRATEGY = enum("all", "any")


def _filter(kind: str, field: str, schema: Schema) -> Schema:
    """One type of message filter: ``field`` (its path or header) must match ``schema``."""
    return obj(
        {"type": {"const": kind}, field: schema, "matcher": REGEX, "matchingStrategy": _STRATEGY},
        ["type", field, "matcher"],
    )


_FILTER: Schema = {
    "anyOf": [
        _filter("jsonpath", "path", {"type": "string", "pattern": JSONPATH.pattern}),
        _filter("avropath", "path", {"type": "string", "pattern": AVROPATH.pattern}),
        _filter("header", "header", {"type": "string", "minLength": 1}),
    ]
}

_BATCH: Schema = {"properties": {"deliveryType": {"const": "BATCH"}}, "required": ["deliveryType"]}
_PASSWORD_GRANT: Schema = {
    "properties": {"oAuthPolicy": {"properties": {"grantType": {"const": "password"}}, "required": ["grantType"]}},
    "required": ["oAuthPolicy"],
}
# what api_json.subscription_from_json checks across fields
_SUBSCRIPTION_RULES: list[Schema] = [
    {
        "if": _BATCH,
        "then": {
            "properties": {
                "subscriptionPolicy": BATCH_POLICY,
                "mode": {"not": {"const": "BROADCAST"}},
                "contentType": {"not": {"const": "AVRO"}},
                "cloudEventsMode": {"type": "null"},
            }
        },
        "else": {"properties": {"subscriptionPolicy": SERIAL_POLICY}},
    },
    {
        "if": _PASSWORD_GRANT,
        "then": {
            "properties": {
                "oAuthPolicy": {"required": ["username", "password"], "properties": {"username": {"minLength": 1}}}
            }
        },
    },
]


# what api_json.topic_from_json checks across fields
_CLOUD_EVENTS_TOPIC: Schema = {
    "if": {"properties": {"cloudEvents": {"const": True}}, "required": ["cloudEvents"]},
    "then": {"properties": {"contentType": {"not": {"const": "AVRO"}}}},
}

# a new subscription names its owner, in either shape (as Hermes: its owner is @NotNull)
_OWNED: Schema = {"anyOf": [{"required": ["owner"]}, {"required": ["supportTeam"]}]}


def patch(schema: Schema) -> Schema:
    """The schema of a PUT: the fields sent change, so none is required."""
    rules = [rule for rule in schema.get("allOf", []) if rule is not _OWNED]
    return {**schema, "required": [], **({"allOf": rules} if rules else {})}


ENTITIES: dict[str, Schema] = {
    "Error": obj(
        {
            "message": STR,
            "code": {
                **STR,
                "description": "what went wrong, e.g. VALIDATION_ERROR; STORED_ENTITY_INVALID: the topic or "
                "subscription as stored fails today's validation (its GET shows why in invalid): correct it with a PUT",
            },
        }
    ),
    "Group": obj({"groupName": GROUP_NAME}),
    "Topic": obj(
        {
            "name": TOPIC_NAME,
            "description": STR,
            "owner": OWNER,
            "contentType": enum("JSON", "AVRO"),
            "ack": enum("NONE", "LEADER", "ALL"),
            "retentionTime": obj(
                {
                    "duration": ranged(1, 10**6),
                    "retentionUnit": enum("SECONDS", "MINUTES", "HOURS", "DAYS"),
                },
                [],
            ),
            "trackingEnabled": BOOL,
            "maxMessageSize": ranged(MIN_MAX_MESSAGE_SIZE, MAX_MAX_MESSAGE_SIZE),
            "offloadMaxMessageSize": ranged(1, MAX_MAX_MESSAGE_SIZE),
            "offlineStorage": obj(
                {"enabled": BOOL, "retentionTime": obj({"duration": ranged(1, 36_500), "infinite": BOOL}, [])}, []
            ),
            "subscribingRestricted": BOOL,
            "auth": obj({"publishers": NAMES, "enabled": BOOL, "unauthenticatedAccessEnabled": BOOL}, []),
            "jsonToAvroDryRun": BOOL,
            "jsonValidationEnabled": BOOL,
            "cloudEvents": {
                **BOOL,
                "description": "our extension: the topic takes CloudEvents only (binary, structured or batched mode), "
                "and a JSON contentType; answered only when true",
            },
            "migratedFromJsonType": BOOL,
            "fallbackToRemoteDatacenterEnabled": BOOL,
            "chaos": obj(
                {
                    "mode": enum("DISABLED", "GLOBAL", "DATACENTER"),
                    "globalPolicy": _CHAOS_POLICY,
                    "datacenterPolicies": {"type": "object", "additionalProperties": _CHAOS_POLICY},
                },
                [],
            ),
            "idempotencyWindow": {
                **obj(
                    {
                        "duration": ranged(1, MAX_IDEMPOTENCY_WINDOW),
                        "retentionUnit": enum("SECONDS", "MINUTES", "HOURS", "DAYS"),
                    },
                    [],
                ),
                "description": "our extension: how long a publish's Idempotency-Key is remembered (default 24 "
                "HOURS, at most 7 days)",
            },
            "schema": {"description": "AVRO topics: the latest Avro schema (an object, or a string holding one)"},
            "createdAt": EPOCH_SECONDS,
            "modifiedAt": EPOCH_SECONDS,
        },
        ["name", "owner"],
    )
    | {"allOf": [_CLOUD_EVENTS_TOPIC]},
    "Subscription": obj(
        {
            "topicName": TOPIC_NAME,
            "name": SIMPLE_NAME,
            "endpoint": ENDPOINT,
            "description": STR,
            "owner": OWNER,
            "supportTeam": {**_OWNER_ID, "description": "older request shape: the owner's id"},
            "contact": STR,
            "state": enum("PENDING", "ACTIVE", "SUSPENDED"),
            "contentType": enum("JSON", "AVRO"),
            "deliveryType": enum("SERIAL", "BATCH"),
            "cloudEventsMode": {
                **enum("BINARY", "STRUCTURED"),
                "description": "our extension, for SERIAL subscriptions of CloudEvents topics: the HTTP binding's "
                "content mode (unset: BINARY, and not answered); BATCH ones receive application/cloudevents-batch+json",
            },
            "subscriptionPolicy": {"type": "object", "description": "SERIAL or BATCH policy, by deliveryType"},
            "mode": enum("ANYCAST", "BROADCAST"),
            "headers": array(
                obj(
                    {
                        "name": {"type": "string", "pattern": r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"},
                        "value": {"type": "string", "pattern": r"^[^\r\n]*$"},
                    }
                )
            ),
            "filters": array(_FILTER),
            "endpointAddressResolverMetadata": {"type": "object"},
            "subscriptionIdentityHeadersEnabled": BOOL,
            "trackingMode": enum("trackingAll", "discardedOnly", "trackingOff"),
            "trackingEnabled": BOOL,
            "oAuthPolicy": obj(
                {
                    "grantType": enum("clientCredentials", "password"),
                    "providerName": {"type": "string", "minLength": 1},
                    "scope": STR,
                    "username": STR,
                    "password": STR,
                },
                ["grantType", "providerName"],
            ),
            "http2Enabled": BOOL,
            "signingSecrets": {
                **array({"anyOf": [{"type": "string", "pattern": SECRET_PATTERN}, {"const": SECRET_MASK}]}),
                "maxItems": MAX_SECRETS,
                "description": "our extension: Standard Webhooks secrets the deliveries are signed with, answered as "
                "******; in a change, each ****** keeps a stored secret, in their order",
            },
            "previousSigningSecretExpiresAt": {
                **EPOCH_SECONDS,
                "description": "our extension: after a generated secret replaced one, when the replaced one (the "
                "second of signingSecrets) stops signing",
            },
            "deadLetters": {
                **obj({"enabled": BOOL}, []),
                "description": "our extension: with enabled, every discarded message goes to the subscription's "
                "dead-letter topic, to be listed and redriven (.../dead-letters); answered only when enabled",
            },
            "autoDeleteWithTopicEnabled": BOOL,
            "monitoringDetails": obj({"severity": enum("CRITICAL", "IMPORTANT", "NON_IMPORTANT"), "reaction": STR}, []),
            "profilingEnabled": BOOL,
            "profilingThresholdMs": ranged(0, 3_600_000),
            "metricsConfig": obj(
                {
                    "messageProcessing": obj(
                        {
                            "thresholdsMilliseconds": {**array(ranged(1, 3_600_000, nullable=False)), "maxItems": 10},
                            "enabled": BOOL,
                        },
                        [],
                    )
                },
                [],
            ),
            "circuitBreaker": {
                **obj(
                    {
                        "consecutiveFailures": ranged(1, 1_000_000),
                        "failureRatio": {"type": ["number", "null"], "minimum": 0.01, "maximum": 1},
                        "window": ranged(1000, 86_400_000),
                        "minimumRequests": ranged(1, 1_000_000),
                        "probeInterval": ranged(100, 3_600_000),
                        "suspendAfter": ranged(1000, MAX_SUSPEND_AFTER_MS),
                    },
                    [],
                ),
                "type": ["object", "null"],
                "description": "our extension: opens after consecutiveFailures failed attempts in a row, or a "
                "failureRatio of at least minimumRequests attempts in the last window (ms); while open, one probe "
                "per probeInterval (ms); open for suspendAfter (ms; absent: never), the subscription is SUSPENDED. "
                "Absent or null: no breaker, and not answered",
            },
            "createdAt": EPOCH_SECONDS,
            "modifiedAt": EPOCH_SECONDS,
        },
        ["name", "endpoint"],
    )
    | {"allOf": [*_SUBSCRIPTION_RULES, _OWNED]},
    "OAuthProvider": obj(
        {
            "name": SIMPLE_NAME,
            "tokenEndpoint": HTTP_URL,
            "clientId": {"type": "string", "minLength": 1},
            "clientSecret": {"type": "string", "minLength": 1, "description": "answered as ******"},
            "tokenRequestInitialDelay": ranged(1, 3_600_000),
            "tokenRequestMaxDelay": ranged(1, 3_600_000),
            "requestTimeout": ranged(1, 300_000),
            "socketTimeout": ranged(0, 300_000),
        },
        ["name", "tokenEndpoint", "clientId", "clientSecret"],
    ),
}
ENTITIES |= {f"{name}Patch": patch(ENTITIES[name]) for name in ("Topic", "Subscription", "OAuthProvider")}
# a group has nothing but its name, which cannot change: the body changes nothing (a groupName sent must be the path's)
ENTITIES["GroupPatch"] = {**obj({}), "description": "nothing to change; a groupName sent must be the path's group"}

"""Every operation of the management API."""

from __future__ import annotations

from typing import Any

from hermes.management.openapi.schemas import (
    ANY,
    BOOL,
    EPOCH_SECONDS,
    INT,
    NAMES,
    STR,
    TOPIC_NAME,
    Schema,
    array,
    enum,
    obj,
    ref,
)

_PROGRESS = {
    "Hermes-Tracking-Progress": {
        "description": "How far the pipeline's tracking job has read the tracking topic: not-started, caught-up, "
        "behind=<events not yet read> or unknown (see docs/management.md)",
        "schema": STR,
    }
}
_IGNORED = {
    "Hermes-Ignored-Fields": {
        "description": "Request fields that were ignored (unknown to this API), as comma-separated JSON paths",
        "schema": STR,
    }
}

_RETRY_AFTER = {
    "Retry-After": {
        "description": "While the metadata store (ZooKeeper) is unreachable: seconds before trying again is worth "
        "it. A read answered from what it said before is a 200 with Hermes-Metadata-Age (docs/cluster.md)",
        "schema": INT,
    }
}


def _op(
    summary: str,
    ok: int = 200,
    body: Schema | None = None,
    request: Schema | None = None,
    errors: tuple[int, ...] = (400, 404, 503),
    empty: tuple[int, ...] = (),
    query: dict[str, Schema] | None = None,
    media: str = "application/json",
) -> Schema:
    """An operation answering ``ok`` (with ``body``), the ``empty`` statuses without a body, or an error.
    An operation with a JSON object ``request`` names ignored request fields in a response header."""
    success: dict[str, Any] = {"description": "OK"}
    if body is not None:
        success["content"] = {media: {"schema": body}}
    if request is not None and ("$ref" in request or request.get("type") == "object"):
        success["headers"] = _IGNORED
    responses: dict[str, Any] = {str(ok): success}
    for status in empty:
        responses[str(status)] = {"description": "No content"}
    for status in errors:
        responses[str(status)] = {"description": "Error", "content": {"application/json": {"schema": ref("Error")}}}
    if 503 in errors:
        responses["503"]["headers"] = _RETRY_AFTER
    op: Schema = {"summary": summary, "responses": responses}
    if query:
        op["parameters"] = [{"name": n, "in": "query", "required": False, "schema": s} for n, s in query.items()]
    if request is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": request}}}
    return op


def _tracking(op: Schema) -> Schema:
    """A read of the tracking tables: its answer says how far the tracking job has got."""
    op["responses"]["200"]["headers"] = _PROGRESS
    return op


_T = "/topics/{topic}"
_S = "/topics/{topic}/subscriptions/{subscription}"
_TRACKED = {"tracked": BOOL}
_DELETE_ERRORS = (400, 403, 404, 503)
_STATE = enum("PENDING", "ACTIVE", "SUSPENDED")  # PENDING: 200, nothing changes (as Hermes)

# epoch milliseconds or an ISO-8601 date
_MOMENT: Schema = {"anyOf": [{"type": "string", "pattern": "^[0-9]{1,15}$"}, {"type": "string", "format": "date-time"}]}

# a redrive's from and to (null: not given), and its ids
_MOMENT_OR_MILLIS: Schema = {
    "anyOf": [{"type": "integer", "minimum": 0, "maximum": 10**15 - 1}, _MOMENT, {"type": "null"}]
}
_DEAD_LETTER_ID: Schema = {
    "anyOf": [{"type": "string", "pattern": "^[0-9]{1,18}$"}, {"type": "integer", "minimum": 0, "maximum": 10**18 - 1}]
}
_IDS: Schema = {"anyOf": [{**array(_DEAD_LETTER_ID), "minItems": 1, "maxItems": 10_000}, {"type": "null"}]}


def _ids_and(bound: str) -> Schema:
    """ids given with ``bound`` (from or to): refused."""
    return {"properties": {"ids": {"type": "array"}, bound: {"not": {"type": "null"}}}, "required": ["ids", bound]}


_UNHEALTHY = _op(
    "Unhealthy subscriptions (JSON, or text/plain lines)",
    body=ref("Unhealthy"),
    query={
        "respectMonitoringSeverity": BOOL,
        "ownerSourceName": STR,
        "ownerId": STR,
        "subscriptionNames": array(STR),
        "qualifiedTopicNames": array(STR),
    },
)


def _status(summary: str) -> Schema:
    """Answered 200 UP, or 503 DOWN with the same body."""
    op = _op(summary, body=ref("Status"), errors=())
    op["responses"]["503"] = {**op["responses"]["200"], "description": "Down"}
    return op


PATHS: dict[str, dict[str, Schema]] = {
    "/status/health": {"get": _status("Health")},
    "/status/ready": {"get": _status("Readiness")},
    "/status/prometheus": {"get": _op("Prometheus metrics", errors=())},
    "/openapi.json": {"get": _op("This document", errors=())},
    "/groups": {
        "get": _op("List groups", body=NAMES),
        "post": _op("Create a group", 201, ref("Group"), ref("Group")),
    },
    "/groups/{group}": {
        "get": _op("Get a group", body=ref("Group")),
        "put": _op("Update a group (its name cannot change)", 204, request=ref("GroupPatch")),
        "delete": _op("Delete a group without topics", errors=_DELETE_ERRORS),
    },
    "/topics": {
        "get": _op("List topics", body=NAMES, query={"groupName": STR, **_TRACKED}),
        "post": _op(
            "Create a topic (AVRO topics may carry a schema)",
            201,
            ref("Topic"),
            ref("Topic"),
            errors=(400, 403, 404, 503),
        ),
    },
    _T: {
        "get": _op("Get a topic, with the latest schema of an AVRO topic", body=ref("TopicAsStored")),
        "put": _op("Update the fields sent", body=ref("Topic"), request=ref("TopicPatch")),
        "delete": _op("Delete a topic without subscriptions", errors=_DELETE_ERRORS),
    },
    _T + "/metrics": {"get": _op("Topic metrics", body=ref("TopicMetrics"))},
    _T + "/schema": {
        "get": _op("Latest Avro schema (204 when none)", body=ANY, empty=(204,)),
        "post": _op("Add a schema version", 201, ref("SchemaVersion"), ANY),
        "delete": _op("Remove the schemas: disabled, as Hermes' default", errors=(400, 404, 406)),
    },
    _T + "/schema/versions": {"get": _op("Schema versions", body={"type": "array", "items": INT})},
    _T + "/schema/versions/{version}": {"get": _op("One schema version (204 when none)", body=ANY, empty=(204,))},
    _T + "/schema/ids/{id}": {
        "get": _op("A schema by id: ids are versions here (204 when none)", body=ANY, empty=(204,))
    },
    _T + "/subscriptions": {
        "get": _op("List subscriptions", body=NAMES, query=_TRACKED),
        "post": _op("Create a subscription", 201, ref("Subscription"), ref("Subscription")),
    },
    _S: {
        "get": _op("Get a subscription", body=ref("SubscriptionAsStored")),
        "put": _op("Update the fields sent", body=ref("Subscription"), request=ref("SubscriptionPatch")),
        "delete": _op("Delete a subscription"),
    },
    _S + "/state": {
        "get": _op("State", body=STR),
        "put": _op('Set "ACTIVE" or "SUSPENDED" ("PENDING" changes nothing)', request=_STATE),
        "post": _op('Set "ACTIVE" or "SUSPENDED" (older form)', request=_STATE),
    },
    _S + "/metrics": {"get": _op("Subscription metrics", body=ref("SubscriptionMetrics"))},
    _S + "/metrics/persistent": {
        "get": _op("Lifetime counts of the subscription", body=ref("PersistentSubscriptionMetrics"))
    },
    _S + "/consumer-groups": {
        "get": _op("The subscription's Kafka consumer group and its members", body=array(ref("ConsumerGroup")))
    },
    _S + "/health": {"get": _op("Subscription health", body=ref("Health"))},
    _S + "/circuit-breaker": {
        "get": _op("Our extension: the circuit breaker of each consumer node delivering it", body=ref("CircuitBreaker"))
    },
    _S + "/undelivered/last": {"get": _op("Last undelivered message", body=ref("UndeliveredMessage"))},
    _S + "/retransmission": {
        "put": _op(
            "Retransmit from a date (?dryRun=true: only answer the offsets)",
            body=ref("RetransmissionSummary"),
            request=obj({"retransmissionDate": {"type": "string", "format": "date-time"}}),
            query={"dryRun": BOOL},
        ),
        "post": _op("Retransmit from an ISO date or -6h (older form)", body=ref("RetransmissionSummary"), request=ANY),
    },
    _S + "/signing-secret": {
        "post": _op(
            "Generate a signing secret, answered this once; the current one signs beside it for the overlap window",
            201,
            obj({"signingSecret": STR, "previousSigningSecretExpiresAt": EPOCH_SECONDS}, ["signingSecret"]),
        )
    },
    _S + "/events/{messageId}/trace": {
        "get": _tracking(_op("The message's trace events in time order (tracking)", body=array(ref("TraceEvent"))))
    },
    _S + "/undelivered": {
        "get": _tracking(
            _op("The last 100 undelivered messages, newest first (tracking)", body=array(ref("TraceEvent")))
        )
    },
    _S + "/statistics": {
        "get": _tracking(
            _op(
                "Per-minute delivery statistics of the last ?minutes= (default 60; tracking; an addition)",
                body=array(ref("DeliveryStatistics")),
            )
        )
    },
    _S + "/dead-letters": {
        "get": _op(
            "The subscription's dead letters, oldest first (an addition): ?limit= (1-1000, default 100), ?from= and "
            "?to= (epoch milliseconds or ISO-8601, both included)",
            body=array(ref("DeadLetter")),
            query={"limit": {"type": "integer", "minimum": 1, "maximum": 1000}, "from": _MOMENT, "to": _MOMENT},
        ),
        "delete": _op("Purge: delete every dead letter written so far (an addition)", body=obj({"purged": INT})),
    },
    _S + "/dead-letters/{deadLetterId}": {"get": _op("One dead letter (an addition)", body=ref("DeadLetter"))},
    _S + "/dead-letters/redrive": {
        "post": _op(
            "Redrive dead letters back into the subscription's delivery (an addition): all ({}), those discarded "
            "from/to, or those of ids; answered with the redrive, which a consumer runs",
            202,
            ref("Redrive"),
            request={
                "type": "object",
                "properties": {"from": _MOMENT_OR_MILLIS, "to": _MOMENT_OR_MILLIS, "ids": _IDS},
                "not": {"anyOf": [_ids_and(bound) for bound in ("from", "to")]},
            },
        )
    },
    _S + "/dead-letters/redrives": {
        "get": _op(
            "The subscription's redrives and their progress, newest first (an addition)", body=array(ref("Redrive"))
        )
    },
    "/unhealthy": {"get": _UNHEALTHY},
    "/unhealthy/": {"get": _UNHEALTHY},
    "/query/topics/metrics": {
        "post": _op("Topic metrics matching a query", body=array(ref("TopicNameWithMetrics")), request=ref("Query"))
    },
    "/query/subscriptions/metrics": {
        "post": _op(
            "Subscription metrics matching a query",
            body=array(ref("SubscriptionNameWithMetrics")),
            request=ref("Query"),
        )
    },
    "/offline-retransmission/tasks": {
        "get": _op(
            "Offline retransmission tasks with status and progress", body=array(ref("OfflineRetransmissionTask"))
        ),
        "post": _op(
            "Republish a time range of a topic's offline storage to a topic",
            201,
            ref("OfflineRetransmissionTask"),
            obj(
                {
                    "type": {"enum": ["topic", "TOPIC"], "description": "Hermes spells it topic; older, TOPIC"},
                    "sourceTopic": TOPIC_NAME,
                    "targetTopic": TOPIC_NAME,
                    "startTimestamp": {"type": "string", "format": "date-time"},
                    "endTimestamp": {"type": "string", "format": "date-time"},
                },
                ["sourceTopic", "targetTopic", "startTimestamp", "endTimestamp"],
            ),
        ),
    },
    "/offline-retransmission/tasks/{taskId}": {"delete": _op("Delete a task (a running one stops)")},
    "/oauth/providers": {
        "get": _op("List OAuth providers", body=NAMES),
        "post": _op("Register an OAuth provider", 201, ref("OAuthProvider"), ref("OAuthProvider")),
    },
    "/oauth/providers/{provider}": {
        "get": _op("Get a provider", body=ref("OAuthProvider")),
        "put": _op("Update the fields sent", body=ref("OAuthProvider"), request=ref("OAuthProviderPatch")),
        "delete": _op("Delete a provider"),
    },
    "/query/groups": {"post": _op("Groups matching a query", body=array(ref("Group")), request=ref("Query"))},
    "/query/topics": {"post": _op("Topics matching a query", body=array(ref("Topic")), request=ref("Query"))},
    "/query/subscriptions": {
        "post": _op("Subscriptions matching a query", body=array(ref("Subscription")), request=ref("Query"))
    },
    "/topics/query": {
        "post": _op("Names of the topics matching a query", body=NAMES, request=ref("Query"), query={"groupName": STR})
    },
    _T + "/subscriptions/query": {
        "post": _op("Names of the topic's subscriptions matching a query", body=NAMES, request=ref("Query"))
    },
    "/search/query": {
        "get": _op(
            "Topics and subscriptions whose name, owner or endpoint contains q",
            body=ref("SearchResults"),
            query={"q": STR},
        )
    },
    "/stats": {"get": _op("Topic and subscription counts", body=ref("Stats"))},
    "/owners/sources": {"get": _op("Owner sources (Plaintext)", body=array(ref("OwnerSource")))},
    "/owners/sources/{source}": {
        "get": _op(
            "Owners matching search, from a source with autocomplete (Plaintext has none: 400)",
            body=array(ref("Owner")),
            query={"search": STR},
        )
    },
    "/owners/sources/{source}/{id}": {"get": _op("An owner", body=ref("Owner"))},
    "/topics/owner/{source}/{id}": {"get": _op("The owner's topics", body=array(ref("Topic")))},
    "/subscriptions/owner/{source}/{id}": {"get": _op("The owner's subscriptions", body=array(ref("Subscription")))},
    "/roles": {"get": _op("The caller's roles", body=NAMES)},
    "/roles/topics/{topic}": {"get": _op("The caller's roles on a topic", body=NAMES)},
    "/roles/topics/{topic}/subscriptions/{subscription}": {
        "get": _op("The caller's roles on a subscription", body=NAMES)
    },
    "/filters/{topic}": {
        "post": _op(
            "Verify filters against a message (base64)",
            body=ref("FiltersVerificationResult"),
            request=ref("FiltersVerification"),
        )
    },
    _T + "/preview": {
        "get": _op("The topic's newest messages (at most 3, each cut to 10 KiB)", body=array(ref("MessagePreview")))
    },
    _T + "/preview/{idx}": {"get": _op("One preview message's bytes", body=ANY)},
    _T + "/preview/cluster/{cluster}/partition/{partition}/offset/{offset}": {
        "get": _op("The message at a partition and offset, as JSON text", body=STR)
    },
    _T + "/clients": {"get": _op("The owners of the topic's subscriptions", body=NAMES)},
    _T + "/offline-clients-source": {"get": _op("Absent here: 404 IMPLEMENTATION_ABSENT", body=ANY)},
    "/dashboards/topics/{topic}": {"get": _op("Absent here: 404 IMPLEMENTATION_ABSENT", body=ANY)},
    "/dashboards/topics/{topic}/subscriptions/{subscription}": {
        "get": _op("Absent here: 404 IMPLEMENTATION_ABSENT", body=ANY)
    },
    "/tracking-urls/topics/{topic}": {"get": _op("Tracking links: none here", body=array(ANY))},
    "/tracking-urls/topics/{topic}/subscriptions/{subscription}": {
        "get": _op("Tracking links: none here", body=array(ANY))
    },
    "/mode": {
        "get": _op("The mode", body=enum("readWrite", "readOnly", "readOnlyAdmin"), media="text/plain"),
        "post": _op("Set the mode", query={"mode": enum("readWrite", "readOnly", "readOnlyAdmin")}),
    },
    "/readiness/datacenters": {"get": _op("Readiness of the datacenter", body=array(ref("DatacenterReadiness")))},
    "/readiness/datacenters/{datacenter}": {"post": _op("Set readiness", 202, request=ref("Readiness"))},
    "/workload-constraints": {"get": _op("Consumer workload constraints", body=ref("WorkloadConstraints"))},
    "/workload-constraints/topic": {
        "put": _op("Create (201) or update (200) a topic's constraints", request=ref("TopicConstraints"), empty=(201,))
    },
    "/workload-constraints/topic/{topic}": {"delete": _op("Remove a topic's constraints")},
    "/workload-constraints/subscription": {
        "put": _op(
            "Create (201) or update (200) a subscription's constraints",
            request=ref("SubscriptionConstraints"),
            empty=(201,),
        )
    },
    "/workload-constraints/subscription/{topic}/{subscription}": {"delete": _op("Remove a subscription's constraints")},
    "/consumers/nodes": {
        "get": _op("Consumer nodes of the cluster: load, assigned subscriptions (docs/cluster.md)", body=array(ANY))
    },
    "/frontends/nodes": {"get": _op("Frontend processes of the cluster and their load", body=array(ANY))},
    "/inactive-topics": {"get": _op("Topics without a message for 7 days", body=array(ref("InactiveTopic")))},
    "/consistency/groups": {"get": _op("Every group", body=NAMES)},
    "/consistency/inconsistencies/groups": {
        "get": _op(
            "Groups that differ between datacenters: none, one datacenter",
            body=array(ANY),
            query={"groupNames": array(STR)},
        )
    },
    "/consistency/sync/groups/{group}": {
        "post": _op("Sync a group between datacenters: nothing to do", query={"primaryDatacenter": STR})
    },
    "/consistency/sync/topics/{topic}": {"post": _op("Sync a topic: nothing to do", query={"primaryDatacenter": STR})},
    "/consistency/sync/topics/{topic}/subscriptions/{subscription}": {
        "post": _op("Sync a subscription: nothing to do", query={"primaryDatacenter": STR})
    },
    "/consistency/inconsistencies/topics": {
        "get": _op("Kafka topics no Hermes topic accounts for", body=NAMES),
        "delete": _op("Delete such a Kafka topic", query={"topicName": STR}),
    },
    "/offline-retransmission/topics/{topic}/tasks": {
        "get": _op("Tasks from or to the topic", body=array(ref("RetransmissionTaskMonitoring")))
    },
    "/offline-retransmission/topics/{topic}/tasks/": {
        "get": _op("Tasks from or to the topic", body=array(ref("RetransmissionTaskMonitoring")))
    },
    "/console": {
        "get": _op(
            "The Hermes console's configuration, pointing it at this installation", body=ref("ConsoleConfiguration")
        )
    },
}

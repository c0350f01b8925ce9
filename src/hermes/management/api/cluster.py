"""Running the installation: the management mode (``/mode``), consumer workload constraints and inactive
topics. Their state is kept in the metadata store, shared by every management
instance (and read by the processes that act on it)."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from hermes.domain.api_json.fields import as_int
from hermes.domain.names import SubscriptionName, TopicName, validate_simple_name
from hermes.errors import HermesError, ValidationError
from hermes.http.server import json_response
from hermes.management.access import principal
from hermes.management.api.bodies import ignored_fields_header, read_object
from hermes.management.context import SERVICE
from hermes.management.services import ManagementService
from hermes.metadata.documents import MANAGEMENT, WORKLOAD_CONSTRAINTS
from hermes.ui import PREFIX

routes = web.RouteTableDef()

READ_WRITE, READ_ONLY, READ_ONLY_ADMIN = "readWrite", "readOnly", "readOnlyAdmin"
MAX_CONSUMERS_NUMBER = 10_000


class ReadOnlyMode(HermesError):
    """A change asked of the management API while it is read-only: Hermes' 503."""

    code = "OTHER"
    status = 503


class ConstraintsNotFound(HermesError):
    """Hermes' ``TOPIC_CONSTRAINTS_DO_NOT_EXIST`` or ``SUBSCRIPTION_CONSTRAINTS_DO_NOT_EXIST``: a 400."""

    status = 400

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


# --- mode ---


async def _mode(service: ManagementService) -> str:
    document = await service.document(MANAGEMENT, "mode")
    return str(document["mode"]) if document else READ_WRITE


def _changes_allowed(request: web.Request) -> bool:
    """As Hermes' read-only filter: reads, queries and ``/mode`` itself are always allowed (and the console's
    forms: the API calls they make are checked here)."""
    path = request.path
    return (
        request.method in ("GET", "HEAD", "OPTIONS")
        or path.startswith(("/query", "/mode", PREFIX + "/"))
        or (path.startswith("/topics") and path.endswith("query"))
    )


@web.middleware
async def read_only_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuses changes while the mode is read-only. As Hermes, admins who signed in pass; with authentication off
    nobody signed in, so the mode holds for every caller."""
    caller = principal(request)
    changing = not _changes_allowed(request) and not (caller.is_admin and caller.signed_in)
    if changing and await _mode(request.app[SERVICE]) != READ_WRITE:
        raise ReadOnlyMode("Action forbidden due to read-only mode")
    return await handler(request)


@routes.get("/mode")
async def get_mode(request: web.Request) -> web.Response:
    return web.Response(text=await _mode(request.app[SERVICE]))


@routes.post("/mode")
async def set_mode(request: web.Request) -> web.Response:
    """``?mode=readWrite|readOnly|readOnlyAdmin``; as Hermes, ``readOnly`` set by hand is ``readOnlyAdmin``."""
    mode = request.query.get("mode")
    if mode not in (READ_WRITE, READ_ONLY, READ_ONLY_ADMIN):
        raise ValidationError(f"must be one of {READ_WRITE}, {READ_ONLY}, {READ_ONLY_ADMIN}", "mode")
    stored = READ_WRITE if mode == READ_WRITE else READ_ONLY_ADMIN
    await request.app[SERVICE].put_document(MANAGEMENT, "mode", {"mode": stored})
    return web.Response(status=200)


# --- workload constraints ---


def _constraints(body: dict[str, Any]) -> dict[str, Any]:
    data = body.get("constraints")
    if not isinstance(data, dict):
        raise ValidationError("must be an object {consumersNumber, reason}", "constraints")
    number = as_int(data.get("consumersNumber"), "constraints.consumersNumber", 1, MAX_CONSUMERS_NUMBER)
    reason = data.get("reason", "")
    if not isinstance(reason, str):
        raise ValidationError("must be a string", "constraints.reason")
    return {"consumersNumber": number, "reason": reason}


@routes.get("/workload-constraints")
async def list_constraints(request: web.Request) -> web.Response:
    documents = await request.app[SERVICE].documents(WORKLOAD_CONSTRAINTS)
    out: dict[str, dict[str, Any]] = {"topicConstraints": {}, "subscriptionConstraints": {}}
    for key, document in sorted(documents.items()):
        kind, _, name = key.partition(":")
        out["topicConstraints" if kind == "topic" else "subscriptionConstraints"][name] = document
    return json_response(out)


async def _put_constraints(request: web.Request, key: str, body: dict[str, Any], schema: str) -> web.Response:
    service = request.app[SERVICE]
    constraints = _constraints(body)
    existed = await service.document(WORKLOAD_CONSTRAINTS, key)
    await service.put_document(WORKLOAD_CONSTRAINTS, key, constraints)
    return web.Response(status=200 if existed else 201, headers=ignored_fields_header(request, body, schema))


async def _delete_constraints(request: web.Request, key: str, missing: ConstraintsNotFound) -> web.Response:
    service = request.app[SERVICE]
    if await service.document(WORKLOAD_CONSTRAINTS, key) is None:
        raise missing
    await service.delete_document(WORKLOAD_CONSTRAINTS, key)
    return web.Response(status=200)


@routes.put("/workload-constraints/topic")
async def put_topic_constraints(request: web.Request) -> web.Response:
    body = await read_object(request)
    name = TopicName.parse(body.get("topicName"), "topicName")  # type: ignore[arg-type]
    return await _put_constraints(request, f"topic:{name.qualified}", body, "TopicConstraints")


@routes.delete("/workload-constraints/topic/{topic}")
async def delete_topic_constraints(request: web.Request) -> web.Response:
    name = TopicName.parse(request.match_info["topic"], "topicName")
    missing = ConstraintsNotFound(f"No workload constraints for topic {name}", "TOPIC_CONSTRAINTS_DO_NOT_EXIST")
    return await _delete_constraints(request, f"topic:{name.qualified}", missing)


@routes.put("/workload-constraints/subscription")
async def put_subscription_constraints(request: web.Request) -> web.Response:
    body = await read_object(request)
    raw = body.get("subscriptionName")
    if not isinstance(raw, str) or "$" not in raw:
        raise ValidationError("must be a qualified subscription name 'group.topic$subscription'", "subscriptionName")
    topic, _, name = raw.rpartition("$")
    qualified = SubscriptionName(
        TopicName.parse(topic, "subscriptionName"), validate_simple_name(name, "subscriptionName")
    )
    return await _put_constraints(request, f"subscription:{qualified.qualified}", body, "SubscriptionConstraints")


@routes.delete("/workload-constraints/subscription/{topic}/{subscription}")
async def delete_subscription_constraints(request: web.Request) -> web.Response:
    topic = TopicName.parse(request.match_info["topic"], "topicName")
    qualified = SubscriptionName(topic, validate_simple_name(request.match_info["subscription"], "subscriptionName"))
    missing = ConstraintsNotFound(
        f"No workload constraints for subscription {qualified}", "SUBSCRIPTION_CONSTRAINTS_DO_NOT_EXIST"
    )
    return await _delete_constraints(request, f"subscription:{qualified.qualified}", missing)


# --- inactive topics ---


@routes.get("/inactive-topics")
async def inactive_topics(request: web.Request) -> web.Response:
    return json_response(await request.app[SERVICE].inactive_topics())

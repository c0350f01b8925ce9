"""``/topics/{topic}/subscriptions``: create, list, get, update, delete, state."""

from __future__ import annotations

from aiohttp import web

from hermes.domain import api_json
from hermes.domain.api_json.fields import seconds
from hermes.domain.subscription import Subscription, SubscriptionState
from hermes.errors import StoredEntityInvalid, ValidationError
from hermes.http.server import json_response, read_json
from hermes.management.access import principal
from hermes.management.api.bodies import flag, ignored_fields_header, read_object
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.openapi.components import SCHEMAS
from hermes.management.openapi.schemas import BATCH_POLICY, SERIAL_POLICY, Schema

routes = web.RouteTableDef()


def request_schema(sub: Subscription) -> Schema:
    """The subscription schema with the policy fields of the subscription's delivery type only: a BATCH
    field sent for a SERIAL subscription is ignored, and named."""
    schema = SCHEMAS["Subscription"]
    policy = BATCH_POLICY if sub.is_batch else SERIAL_POLICY
    return {**schema, "properties": {**schema["properties"], "subscriptionPolicy": policy}}


@routes.get("/topics/{topic}/subscriptions")
async def list_subscriptions(request: web.Request) -> web.Response:
    """Also those stored that fail validation, but with ``tracked``: they deliver, and so track, nothing."""
    subs = await request.app[SERVICE].stored_subscriptions(topic_name(request))
    if flag(request, "tracked"):
        return json_response([s.name for s in subs if isinstance(s, Subscription) and s.tracking_enabled])
    return json_response([s.name for s in subs])


@routes.post("/topics/{topic}/subscriptions")
async def create_subscription(request: web.Request) -> web.Response:
    topic = topic_name(request)
    body = await read_object(request)
    subscription = api_json.subscription_from_json(body, topic)
    api_json.check_owner_named(body, created=True)  # once every field's own check passed
    created = await request.app[SERVICE].create_subscription(
        subscription, inflight_size_changes=principal(request).is_admin
    )
    headers = ignored_fields_header(request, body, request_schema(created))
    return json_response(api_json.subscription_to_json(created), status=201, headers=headers)


@routes.get("/topics/{topic}/subscriptions/{subscription}")
async def get_subscription(request: web.Request) -> web.Response:
    try:
        sub = await request.app[SERVICE].subscription(topic_name(request), request.match_info["subscription"])
    except StoredEntityInvalid as invalid:  # as stored, for its owner to correct with a PUT
        return json_response(api_json.stored_subscription_to_json(invalid))
    return json_response(api_json.subscription_to_json(sub))


@routes.put("/topics/{topic}/subscriptions/{subscription}")
async def update_subscription(request: web.Request) -> web.Response:
    patch = await read_object(request)
    api_json.check_owner_named(patch, created=False)
    updated = await request.app[SERVICE].update_subscription(
        topic_name(request),
        request.match_info["subscription"],
        patch,
        inflight_size_changes=principal(request).is_admin,
    )
    headers = ignored_fields_header(request, patch, request_schema(updated))
    return json_response(api_json.subscription_to_json(updated), headers=headers)


@routes.delete("/topics/{topic}/subscriptions/{subscription}")
async def delete_subscription(request: web.Request) -> web.Response:
    await request.app[SERVICE].delete_subscription(topic_name(request), request.match_info["subscription"])
    return web.Response(status=200)


@routes.put("/topics/{topic}/subscriptions/{subscription}/state")
@routes.post("/topics/{topic}/subscriptions/{subscription}/state")
async def change_state(request: web.Request) -> web.Response:
    body = await read_json(request)
    try:
        state = SubscriptionState(body)
    except (ValueError, TypeError):
        raise ValidationError('must be "ACTIVE" or "SUSPENDED" (a JSON string)', "state") from None
    service, topic, name = request.app[SERVICE], topic_name(request), request.match_info["subscription"]
    if state is SubscriptionState.PENDING:  # as Hermes: nobody but the consumers moves a state to or from PENDING
        await service.subscription(topic, name)  # still 404 for an unknown subscription
    else:
        await service.change_state(topic, name, state)
    return web.Response(status=200)


@routes.get("/topics/{topic}/subscriptions/{subscription}/state")
async def get_state(request: web.Request) -> web.Response:
    sub = await request.app[SERVICE].subscription(topic_name(request), request.match_info["subscription"])
    return json_response(sub.state.value)


@routes.post("/topics/{topic}/subscriptions/{subscription}/signing-secret")
async def generate_signing_secret(request: web.Request) -> web.Response:
    """The only answer that ever shows the secret (our extension: signed deliveries)."""
    secret, previous_expires_at = await request.app[SERVICE].generate_signing_secret(
        topic_name(request), request.match_info["subscription"]
    )
    body: dict[str, object] = {"signingSecret": secret}
    if previous_expires_at:
        body["previousSigningSecretExpiresAt"] = seconds(previous_expires_at)
    return json_response(body, status=201, headers={"Cache-Control": "no-store"})

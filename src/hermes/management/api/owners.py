"""Owners and roles. Owners come from one source, Hermes' ``Plaintext``: an owner is any id the caller types
(it has no autocomplete, so the console shows a text field), and its name is its id. Roles: the caller's, as the
access rules see them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from hermes.domain import api_json
from hermes.domain.names import validate_simple_name
from hermes.domain.subscription import Subscription
from hermes.domain.topic import Owner, Topic
from hermes.errors import NotFoundError, OwnerSourceNotFound, OwnerSourceWithoutAutocomplete, StoredEntityInvalid
from hermes.http.server import json_response
from hermes.management.access import principal
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE

routes = web.RouteTableDef()

PLAINTEXT = "Plaintext"


def _owner(request: web.Request) -> Owner:
    source = request.match_info["source"]
    if source != PLAINTEXT:
        raise OwnerSourceNotFound(f"Owner source {source} not found (the one source is {PLAINTEXT})")
    return Owner(source, request.match_info.get("id", ""))


def _owner_json(owner_id: str) -> dict[str, str]:
    return {"id": owner_id, "name": owner_id}


@routes.get("/owners/sources")
async def list_sources(_: web.Request) -> web.Response:
    return json_response([{"name": PLAINTEXT, "autocomplete": False, "deprecated": False}])


@routes.get("/owners/sources/{source}")
async def search_owners(request: web.Request) -> web.Response:
    _owner(request)
    raise OwnerSourceWithoutAutocomplete(f"Owner source '{PLAINTEXT}' doesn't support autocomplete")


@routes.get("/owners/sources/{source}/{id}")
async def get_owner(request: web.Request) -> web.Response:
    return json_response(_owner_json(_owner(request).id))


@routes.get("/topics/owner/{source}/{id}")
async def topics_of_owner(request: web.Request) -> web.Response:
    owner = _owner(request)
    topics = await request.app[SERVICE].topics()
    return json_response([api_json.topic_to_json(t) for t in topics if t.owner == owner])


@routes.get("/subscriptions/owner/{source}/{id}")
async def subscriptions_of_owner(request: web.Request) -> web.Response:
    owner = _owner(request)
    subs = await request.app[SERVICE].subscriptions()
    return json_response([api_json.subscription_to_json(s) for s in subs if s.owner == owner])


def _roles(request: web.Request) -> list[str]:
    return ["admin", "any"] if principal(request).is_admin else ["any"]


@routes.get("/roles")
async def roles(request: web.Request) -> web.Response:
    return json_response(_roles(request))


async def _owns(request: web.Request, owned: Callable[[], Awaitable[Topic | Subscription]]) -> bool:
    """Whether the caller owns what ``owned`` (a look-up of it) finds; admins own everything."""
    caller = principal(request)
    if caller.is_admin:
        return True
    try:
        found = await owned()
    except NotFoundError:
        return False
    except StoredEntityInvalid as invalid:  # its owner as stored, who may correct it
        owner = invalid.stored.get("owner")
        return isinstance(owner, dict) and caller.owns(str(owner.get("id", "")))
    return caller.owns(found.owner.id)


@routes.get("/roles/topics/{topic}")
async def topic_roles(request: web.Request) -> web.Response:
    name = topic_name(request)
    owner = await _owns(request, lambda: request.app[SERVICE].topic(name))
    return json_response([*_roles(request), *(["topicOwner"] if owner else [])])


@routes.get("/roles/topics/{topic}/subscriptions/{subscription}")
async def subscription_roles(request: web.Request) -> web.Response:
    name = topic_name(request)
    subscription = request.match_info["subscription"]
    validate_simple_name(subscription, "subscriptionName")
    service = request.app[SERVICE]
    topic_owner = await _owns(request, lambda: service.topic(name))
    subscription_owner = await _owns(request, lambda: service.subscription(name, subscription))
    found = (["topicOwner"] if topic_owner else []) + (["subscriptionOwner"] if subscription_owner else [])
    return json_response([*_roles(request), *found])

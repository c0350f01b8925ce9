"""Owners and roles. Owners come from one source, Hermes' ``Plaintext``: an owner is any id, and searching
it suggests the ids topics and subscriptions already name. Roles: the caller's, as the access rules see them
(while authentication is off every caller is an admin, so each answer lists every role Hermes asks about)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from hermes.domain import api_json
from hermes.domain.names import validate_simple_name
from hermes.domain.topic import Owner
from hermes.errors import NotFoundError, OwnerSourceNotFound
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
    return json_response([{"name": PLAINTEXT, "autocomplete": True, "deprecated": False}])


@routes.get("/owners/sources/{source}")
async def search_owners(request: web.Request) -> web.Response:
    _owner(request)
    text = request.query.get("search", "").lower()
    repository = request.app[SERVICE].repository

    def known() -> set[str]:
        return {t.owner.id for t in repository.list_topics()} | {s.owner.id for s in repository.list_subscriptions()}

    ids = sorted(i for i in await asyncio.to_thread(known) if i and text in i.lower())
    return json_response([_owner_json(i) for i in ids])


@routes.get("/owners/sources/{source}/{id}")
async def get_owner(request: web.Request) -> web.Response:
    return json_response(_owner_json(_owner(request).id))


@routes.get("/topics/owner/{source}/{id}")
async def topics_of_owner(request: web.Request) -> web.Response:
    owner = _owner(request)
    topics = await asyncio.to_thread(request.app[SERVICE].repository.list_topics)
    return json_response([api_json.topic_to_json(t) for t in topics if t.owner == owner])


@routes.get("/subscriptions/owner/{source}/{id}")
async def subscriptions_of_owner(request: web.Request) -> web.Response:
    owner = _owner(request)
    subs = await asyncio.to_thread(request.app[SERVICE].repository.list_subscriptions)
    return json_response([api_json.subscription_to_json(s) for s in subs if s.owner == owner])


def _roles(request: web.Request) -> list[str]:
    return ["admin", "any"] if principal(request).is_admin else ["any"]


@routes.get("/roles")
async def roles(request: web.Request) -> web.Response:
    return json_response(_roles(request))


async def _owns(request: web.Request, owner: Callable[[], Owner]) -> bool:
    """Whether the caller owns what ``owner`` (a blocking lookup of it) names; admins own everything."""
    caller = principal(request)
    if caller.is_admin:
        return True
    try:
        found = await asyncio.to_thread(owner)
    except NotFoundError:
        return False
    return caller.owns(found.id)


@routes.get("/roles/topics/{topic}")
async def topic_roles(request: web.Request) -> web.Response:
    name = topic_name(request)
    repository = request.app[SERVICE].repository
    owner = await _owns(request, lambda: repository.get_topic(name).owner)
    return json_response([*_roles(request), *(["topicOwner"] if owner else [])])


@routes.get("/roles/topics/{topic}/subscriptions/{subscription}")
async def subscription_roles(request: web.Request) -> web.Response:
    name = topic_name(request)
    subscription = request.match_info["subscription"]
    validate_simple_name(subscription, "subscriptionName")
    repository = request.app[SERVICE].repository
    topic_owner = await _owns(request, lambda: repository.get_topic(name).owner)
    subscription_owner = await _owns(request, lambda: repository.get_subscription(name, subscription).owner)
    found = (["topicOwner"] if topic_owner else []) + (["subscriptionOwner"] if subscription_owner else [])
    return json_response([*_roles(request), *found])

"""Hermes' hooks into an installation's other tools, answered as Hermes answers without them: metrics
dashboards and offline clients are ``IMPLEMENTATION_ABSENT``, tracking URLs an empty list. Also a topic's
clients: the owners of its subscriptions."""

from __future__ import annotations

from aiohttp import web

from hermes.domain.names import validate_simple_name
from hermes.errors import ImplementationAbsent
from hermes.http.server import json_response
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE

routes = web.RouteTableDef()


@routes.get("/topics/{topic}/clients")
async def topic_clients(request: web.Request) -> web.Response:
    subs = await request.app[SERVICE].subscriptions(topic_name(request))
    return json_response(list(dict.fromkeys(s.owner.id for s in subs)))


@routes.get("/topics/{topic}/offline-clients-source")
async def offline_clients_source(_: web.Request) -> web.Response:
    raise ImplementationAbsent("Offline clients implementation is absent")


@routes.get("/dashboards/topics/{topic}")
@routes.get("/dashboards/topics/{topic}/subscriptions/{subscription}")
async def dashboard(_: web.Request) -> web.Response:
    raise ImplementationAbsent("Dashboard url implementation is absent")


@routes.get("/tracking-urls/topics/{topic}")
@routes.get("/tracking-urls/topics/{topic}/subscriptions/{subscription}")
async def tracking_urls(request: web.Request) -> web.Response:
    topic_name(request)
    if "subscription" in request.match_info:
        validate_simple_name(request.match_info["subscription"], "subscriptionName")
    return json_response([])

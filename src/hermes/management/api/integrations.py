"""Hermes' hooks into an installation's other tools, answered as Hermes answers without them: metrics
dashboards and offline clients are ``IMPLEMENTATION_ABSENT``, tracking URLs an empty list. Also a topic's
clients: the owners of its subscriptions."""

from __future__ import annotations

import asyncio

from aiohttp import web

from hermes.domain.names import validate_simple_name
from hermes.errors import ImplementationAbsent
from hermes.http.server import json_response
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE


def register(router: web.UrlDispatcher) -> None:
    router.add_get("/topics/{topic}/clients", topic_clients)
    router.add_get("/topics/{topic}/offline-clients-source", offline_clients_source)
    router.add_get("/dashboards/topics/{topic}", dashboard)
    router.add_get("/dashboards/topics/{topic}/subscriptions/{subscription}", dashboard)
    router.add_get("/tracking-urls/topics/{topic}", tracking_urls)
    router.add_get("/tracking-urls/topics/{topic}/subscriptions/{subscription}", tracking_urls)


async def topic_clients(request: web.Request) -> web.Response:
    repository = request.app[SERVICE].repository
    name = topic_name(request)
    await asyncio.to_thread(repository.get_topic, name)
    subs = await asyncio.to_thread(repository.list_subscriptions, name)
    return json_response(list(dict.fromkeys(s.owner.id for s in subs)))


async def offline_clients_source(_: web.Request) -> web.Response:
    raise ImplementationAbsent("Offline clients implementation is absent")


async def dashboard(_: web.Request) -> web.Response:
    raise ImplementationAbsent("Dashboard url implementation is absent")


async def tracking_urls(request: web.Request) -> web.Response:
    topic_name(request)
    if "subscription" in request.match_info:
        validate_simple_name(request.match_info["subscription"], "subscriptionName")
    return json_response([])

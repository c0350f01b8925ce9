"""``/topics/{topic}/subscriptions/{subscription}/dead-letters`` (our extension): list, show, purge and redrive a
subscription's dead letters."""

from __future__ import annotations

from aiohttp import web

from hermes.domain.subscription import Subscription
from hermes.errors import DeadLettersOfUnknownSubscription, SubscriptionNotFound
from hermes.http.server import json_response, read_json
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.management.dead_letters import REQUESTS, parse_limit, parse_moment

routes = web.RouteTableDef()

_PATH = "/topics/{topic}/subscriptions/{subscription}/dead-letters"


async def _subscription(request: web.Request) -> Subscription:
    try:
        return await request.app[SERVICE].subscription(topic_name(request), request.match_info["subscription"])
    except SubscriptionNotFound as exc:
        raise DeadLettersOfUnknownSubscription(exc.message) from None


@routes.get(_PATH)
async def list_dead_letters(request: web.Request) -> web.Response:
    query = request.query
    limit = parse_limit(query.get("limit"))
    since, until = parse_moment(query.get("from"), "from"), parse_moment(query.get("to"), "to")
    letters = await request.app[SERVICE].dead_letters(await _subscription(request), limit, since, until)
    REQUESTS.labels(operation="list").inc()
    return json_response([letter.to_json() for letter in letters])


@routes.get(_PATH + "/{deadLetterId:[0-9]+}")
async def show_dead_letter(request: web.Request) -> web.Response:
    letter = await request.app[SERVICE].dead_letter(await _subscription(request), request.match_info["deadLetterId"])
    REQUESTS.labels(operation="show").inc()
    return json_response(letter.to_json())


@routes.delete(_PATH)
async def purge_dead_letters(request: web.Request) -> web.Response:
    purged = await request.app[SERVICE].purge_dead_letters(await _subscription(request))
    REQUESTS.labels(operation="purge").inc()
    return json_response({"purged": purged})


@routes.post(_PATH + "/redrive")
async def redrive(request: web.Request) -> web.Response:
    subscription = await _subscription(request)
    body = await read_json(request)
    created = await request.app[SERVICE].redrive(subscription, body)
    REQUESTS.labels(operation="redrive").inc()
    return json_response(created.to_document(), status=202)


@routes.get(_PATH + "/redrives")
async def redrives(request: web.Request) -> web.Response:
    jobs = await request.app[SERVICE].redrives(await _subscription(request))
    REQUESTS.labels(operation="redrives").inc()
    return json_response([job.to_document() for job in jobs])

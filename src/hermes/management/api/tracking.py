"""Message tracking reads: a message's trace, the last 100 undelivered messages, per-minute delivery
statistics (an addition to Hermes). All read what the pipeline's tracking job wrote; a subscription with no
tracked events answers an empty list, an unknown topic or subscription 404. Every answer says in
``Hermes-Tracking-Progress`` how far the job has got, so an empty list while it starts or catches up is not
mistaken for "nothing happened"."""

from __future__ import annotations

import time

from aiohttp import web

from hermes.domain.subscription import Subscription
from hermes.errors import ValidationError
from hermes.http.server import json_response
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE

routes = web.RouteTableDef()

PROGRESS_HEADER = "Hermes-Tracking-Progress"

_MAX_MINUTES = 7 * 24 * 60


async def _subscription(request: web.Request) -> Subscription:
    return await request.app[SERVICE].subscription(topic_name(request), request.match_info["subscription"])


async def _progress(request: web.Request, statistics: bool = False) -> dict[str, str]:
    return {PROGRESS_HEADER: await request.app[SERVICE].tracking_progress(statistics=statistics)}


@routes.get("/topics/{topic}/subscriptions/{subscription}/events/{messageId}/trace")
async def trace(request: web.Request) -> web.Response:
    sub = await _subscription(request)
    events = await request.app[SERVICE].trace(sub, request.match_info["messageId"])
    return json_response(events, headers=await _progress(request))


@routes.get("/topics/{topic}/subscriptions/{subscription}/undelivered")
async def undelivered(request: web.Request) -> web.Response:
    events = await request.app[SERVICE].undelivered(await _subscription(request))
    return json_response(events, headers=await _progress(request))


@routes.get("/topics/{topic}/subscriptions/{subscription}/statistics")
async def statistics(request: web.Request) -> web.Response:
    raw = request.query.get("minutes", "60")
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= _MAX_MINUTES:
        raise ValidationError(f"must be a whole number of minutes from 1 to {_MAX_MINUTES}", "minutes")
    sub = await _subscription(request)
    since = (int(time.time()) // 60 - int(raw) + 1) * 60_000
    rows = await request.app[SERVICE].delivery_statistics(sub, since)
    return json_response(rows, headers=await _progress(request, statistics=True))

"""Message tracking reads: a message's trace, the last 100 undelivered messages, per-minute delivery
statistics (an addition to Hermes). All read what the pipeline's tracking job wrote; a subscription with no
tracked events (never tracked, or the pipeline not running) answers an empty list, an unknown topic or
subscription 404."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from hermes.errors import ValidationError
from hermes.http.server import json_response
from hermes.management.api.topics import topic_name
from hermes.management.context import SERVICE
from hermes.pipeline.traces import TrackingStore, tracking_root

routes = web.RouteTableDef()

_MAX_MINUTES = 7 * 24 * 60


async def _store(request: web.Request) -> tuple[TrackingStore, str, str]:
    service = request.app[SERVICE]
    topic = topic_name(request)
    name = request.match_info["subscription"]
    await asyncio.to_thread(service.repository.get_subscription, topic, name)  # 404 when unknown
    return TrackingStore(tracking_root(service.settings)), topic.qualified, name


@routes.get("/topics/{topic}/subscriptions/{subscription}/events/{messageId}/trace")
async def trace(request: web.Request) -> web.Response:
    store, topic, name = await _store(request)
    return json_response(await asyncio.to_thread(store.trace, topic, name, request.match_info["messageId"]))


@routes.get("/topics/{topic}/subscriptions/{subscription}/undelivered")
async def undelivered(request: web.Request) -> web.Response:
    store, topic, name = await _store(request)
    return json_response(await asyncio.to_thread(store.undelivered, topic, name))


@routes.get("/topics/{topic}/subscriptions/{subscription}/statistics")
async def statistics(request: web.Request) -> web.Response:
    raw = request.query.get("minutes", "60")
    if not raw.isdigit() or not 1 <= int(raw) <= _MAX_MINUTES:
        raise ValidationError(f"must be a whole number of minutes from 1 to {_MAX_MINUTES}", "minutes")
    store, topic, name = await _store(request)
    since = (int(time.time()) // 60 - int(raw) + 1) * 60_000
    return json_response(await asyncio.to_thread(store.statistics, topic, name, since))

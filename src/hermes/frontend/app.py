"""The publishing API application."""

from __future__ import annotations

from aiohttp import web

from hermes.domain.message import MESSAGE_ID_HEADER, PARTITION_KEY_HEADER
from hermes.errors import TopicNotFound
from hermes.frontend.publishing import Publisher
from hermes.http.server import error_middleware, json_response
from hermes.metadata.cache import MetadataCache

PUBLISHER = web.AppKey("publisher", Publisher)
CACHE = web.AppKey("cache", MetadataCache)


def create_app(publisher: Publisher, cache: MetadataCache, max_body: int = 64 * 1024 * 1024) -> web.Application:
    app = web.Application(middlewares=[error_middleware], client_max_size=max_body)
    app[PUBLISHER] = publisher
    app[CACHE] = cache
    app.router.add_post("/topics/{topic}", publish)
    app.router.add_get("/status/health", _health)
    app.router.add_get("/status/ready", _health)
    return app


async def publish(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    cache = request.app[CACHE]
    topic = cache.topic(name) or await cache.refresh_topic(name)
    if topic is None:
        raise TopicNotFound(f"Topic {name} not found")
    body = await request.read()
    result = await request.app[PUBLISHER].publish(topic, body, request.headers.get(PARTITION_KEY_HEADER))
    return web.Response(status=201 if result.acknowledged else 202, headers={MESSAGE_ID_HEADER: result.message_id})


async def _health(_: web.Request) -> web.Response:
    return json_response({"status": "UP"})

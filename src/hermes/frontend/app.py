"""The publishing API application."""

from __future__ import annotations

import functools
import time

from aiohttp import web

from hermes.domain.message import MESSAGE_ID_HEADER
from hermes.domain.topic import Topic
from hermes.errors import HermesError, TopicNotFound, UnsupportedMediaType
from hermes.frontend.metrics import PUBLISH_REQUESTS, PublishedCounter
from hermes.frontend.publishing import Publisher
from hermes.http import status as status_routes
from hermes.http.server import answer_routing_errors, error_answer, shaped
from hermes.metadata.cache import MetadataCache

# An unknown topic is looked up in the store at most once per this many seconds (the cache is fed by
# change notifications; this only closes the gap of a topic created a moment ago).
_NEGATIVE_TTL = 1.0


class TopicLookup:
    def __init__(self, cache: MetadataCache) -> None:
        self._cache = cache
        self._unknown: dict[str, float] = {}

    async def get(self, name: str) -> Topic:
        topic = self._cache.topic(name)
        if topic is not None:
            return topic
        now = time.monotonic()
        if now - self._unknown.get(name, -_NEGATIVE_TTL) >= _NEGATIVE_TTL:
            if len(self._unknown) > 10_000:
                self._unknown.clear()
            self._unknown[name] = now
            topic = await self._cache.refresh_topic(name)
        if topic is None:
            raise TopicNotFound(f"Topic {name} not found")
        return topic


@functools.lru_cache(maxsize=256)
def _accepts(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind in ("", "application/json", "text/plain", "*/*") or kind.endswith("+json")


def create_app(
    publisher: Publisher, cache: MetadataCache, published: PublishedCounter, max_body: int = 64 * 1024 * 1024
) -> web.Application:
    # No middleware: the publish handler answers its own errors in the error shape, sparing every publish the
    # two coroutines a middleware costs; the other routes and the routing errors are shaped one by one.
    app = web.Application(client_max_size=max_body)
    app.router.add_post("/topics/{topic}", _PublishHandler(publisher, cache, TopicLookup(cache), published).publish)
    status_routes.register(app.router, shaped)
    answer_routing_errors(app.router)
    return app


class _PublishHandler:
    """``POST /topics/{topic}``, with what it needs bound."""

    def __init__(
        self, publisher: Publisher, cache: MetadataCache, topics: TopicLookup, published: PublishedCounter
    ) -> None:
        self._publisher = publisher
        self._cache = cache
        self._topics = topics
        self._published = published

    async def publish(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        name = request.match_info["topic"]
        status = 500
        try:
            content_type = request.headers.get("Content-Type", "")
            if not _accepts(content_type):
                raise UnsupportedMediaType(
                    f"Content-Type {content_type} is not accepted; publish JSON (application/json)"
                )
            topic = self._cache.topic(name) or await self._topics.get(name)
            body = await request.read()
            result = await self._publisher.publish(topic, body, request.headers)
            status = 201 if result.acknowledged else 202
            self._published.count(name)
            return web.Response(status=status, headers={MESSAGE_ID_HEADER: result.message_id})
        except Exception as exc:
            status = exc.status if isinstance(exc, HermesError | web.HTTPException) else 500
            return error_answer(request, exc)
        finally:
            PUBLISH_REQUESTS.record(name if status != 404 else "unknown", status, time.perf_counter() - started)

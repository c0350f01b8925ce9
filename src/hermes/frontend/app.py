"""The publishing API on the lean HTTP server: ``POST /topics/{topic}`` and the status routes, with Hermes'
statuses, headers and error shape."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from urllib.parse import unquote

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hermes.domain.message import MESSAGE_ID_HEADER
from hermes.domain.topic import Topic
from hermes.errors import HermesError, TopicNotFound, UnsupportedMediaType
from hermes.frontend.metrics import PUBLISH_REQUESTS, PublishedCounter
from hermes.frontend.publishing import Publisher, PublishResult
from hermes.http.lean import Request, error_body
from hermes.metadata.cache import MetadataCache

log = logging.getLogger(__name__)

JSON = "application/json"
# An unknown topic is looked up in the store at most once per this many seconds (the cache is fed by
# change notifications; this only closes the gap of a topic created a moment ago).
_NEGATIVE_TTL = 1.0
_TOPICS = "/topics/"
_HEALTH = b'{"status":"UP"}'


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


class PublishingApi:
    """The request handler of the publishing port (``hermes.http.lean.Handler``)."""

    def __init__(self, publisher: Publisher, cache: MetadataCache, published: PublishedCounter) -> None:
        self._publisher = publisher
        self._cache = cache
        self._topics = TopicLookup(cache)
        self._published = published
        self._lookups: set[asyncio.Task[None]] = set()  # tasks looking up topics missing from the cache

    def __call__(self, request: Request) -> None:
        path = request.path
        if path.startswith(_TOPICS):
            name = unquote(path[len(_TOPICS) :]) if "%" in path else path[len(_TOPICS) :]
            if not name or "/" in name:
                _not_found(request)
            elif request.method != "POST":
                _not_allowed(request, "POST")
            else:
                self._publish(request, name)
        elif path in ("/status/health", "/status/ready", "/status/prometheus"):
            if request.method not in ("GET", "HEAD"):
                _not_allowed(request, "GET,HEAD")
            elif path == "/status/prometheus":
                request.respond(200, body=generate_latest(), content_type=CONTENT_TYPE_LATEST)
            else:
                request.respond(200, body=_HEALTH, content_type=JSON)
        else:
            _not_found(request)

    def _publish(self, request: Request, name: str) -> None:
        started = time.perf_counter()
        answer = functools.partial(self._answer, request, name, started)
        try:
            content_type = request.headers.get("content-type", "")
            if not _accepts(content_type):
                raise UnsupportedMediaType(
                    f"Content-Type {content_type} is not accepted; publish JSON (application/json)"
                )
            topic = self._cache.topic(name)
            if topic is None:
                self._publish_uncached(request, name, answer)
                return
            self._publisher.publish(topic, request.body, request.headers, answer)
        except HermesError as exc:
            answer(exc)

    def _publish_uncached(self, request: Request, name: str, answer: functools.partial[None]) -> None:
        """A topic the cache does not know (yet): looked up in the store, as a task."""

        async def look_up() -> None:
            try:
                topic = await self._topics.get(name)
                self._publisher.publish(topic, request.body, request.headers, answer)
            except HermesError as exc:
                answer(exc)

        task = asyncio.get_running_loop().create_task(look_up())
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    def _answer(self, request: Request, name: str, started: float, outcome: PublishResult | Exception) -> None:
        if isinstance(outcome, PublishResult):
            status = 201 if outcome.acknowledged else 202
            self._published.count(name)
            request.respond(status, ((MESSAGE_ID_HEADER, outcome.message_id),))
        elif isinstance(outcome, HermesError):
            status = outcome.status
            request.respond(status, body=orjson.dumps(outcome.to_body()), content_type=JSON)
        else:
            status = 500
            log.error("unhandled error publishing to %s", name, exc_info=outcome)
            request.respond(status, body=error_body("internal error", "INTERNAL_ERROR"), content_type=JSON)
        PUBLISH_REQUESTS.record(name if status != 404 else "unknown", status, time.perf_counter() - started)


def _not_found(request: Request) -> None:
    request.respond(404, body=error_body("Not Found", "NOT_FOUND"), content_type=JSON)


def _not_allowed(request: Request, allow: str) -> None:
    request.respond(
        405, (("Allow", allow),), body=error_body("Method Not Allowed", "METHOD_NOT_ALLOWED"), content_type=JSON
    )

"""The publishing API on the lean HTTP server: ``POST /topics/{topic}``, the status routes and ``/openapi.json``,
with Hermes' statuses, headers and error shape (a publish's errors carry its ``Hermes-Message-Id`` too, as Hermes')."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hermes.domain.message import MESSAGE_ID_HEADER, new_message_id
from hermes.domain.topic import Topic
from hermes.errors import HermesError, TopicNotFound
from hermes.frontend.access import Caller, PublishAccess, Unchecked
from hermes.frontend.openapi import DOCUMENT_JSON
from hermes.frontend.publish_metrics import PUBLISH_REQUESTS, PublishedCounter
from hermes.frontend.publishing import Publisher, PublishResult
from hermes.frontend.readiness import Readiness
from hermes.http.lean import Handler, Request, error_body
from hermes.metadata.cache import MetadataCache
from hermes.offload import OFFLOAD_PREFIX

if TYPE_CHECKING:  # imported only when tracing is on: the extra's package
    from hermes.telemetry.spans import Tracing

log = logging.getLogger(__name__)

JSON = "application/json"
# An unknown topic is looked up in the store at most once per this many seconds (the cache is fed by
# change notifications; this only closes the gap of a topic created a moment ago).
_NEGATIVE_TTL = 1.0
_TOPICS = "/topics/"
TEXT = "text/plain"
# Hermes' frontend answers these in plain text: "/", ping and health say it runs; ready says it can publish.
_HEALTH = ("/", "/status/ping", "/status/health")
_READY = "/status/ready"
_STATUS = (*_HEALTH, _READY, "/status/prometheus")
_UNLABELLED = frozenset({401, 404, 429})
# as Stripe's API says it of a repeated Idempotency-Key
_REPLAYED = ("Idempotent-Replayed", "true")


class TopicLookup:
    def __init__(self, cache: MetadataCache) -> None:
        self._cache = cache
        self._unknown: dict[str, float] = {}
        # look-ups under way: publishes that come meanwhile wait for the same one (they were answered 404 while
        # the first was still reading a topic created a moment ago)
        self._pending: dict[str, asyncio.Future[Topic | None]] = {}

    async def get(self, name: str) -> Topic:
        topic = self._cache.topic(name)
        if topic is not None:
            return topic
        pending = self._pending.get(name)
        now = time.monotonic()
        if pending is None and now - self._unknown.get(name, -_NEGATIVE_TTL) >= _NEGATIVE_TTL:
            if len(self._unknown) > 10_000:
                self._unknown.clear()
            self._unknown[name] = now
            pending = self._pending[name] = asyncio.ensure_future(self._cache.refresh_topic(name))
            pending.add_done_callback(lambda _: self._pending.pop(name, None))
        if pending is not None:
            topic = await asyncio.shield(pending)
        if topic is None:
            raise TopicNotFound(f"Topic {name} not found")
        return topic


class PublishingApi:
    """The request handler of the publishing port (``hermes.http.lean.Handler``); ``offload`` serves the offload
    service's routes (``hermes.offload.api``)."""

    def __init__(
        self,
        publisher: Publisher,
        cache: MetadataCache,
        published: PublishedCounter,
        readiness: Readiness,
        access: PublishAccess,
        exposition: Callable[[], bytes] = generate_latest,  # a worker's covers every worker
        offload: Handler | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self._publisher = publisher
        self._tracing = tracing
        self._access = access
        self._exposition = exposition
        self._offload = offload
        self._readiness = readiness
        self._cache = cache
        self._topics = TopicLookup(cache)
        self._published = published
        self._lookups: set[asyncio.Task[None]] = set()  # tasks checking credentials or looking up topics

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
        elif path in _STATUS:
            if request.method not in ("GET", "HEAD"):
                _not_allowed(request, "GET,HEAD")
            elif path == "/status/prometheus":
                self._scrape(request)
            elif problems := self._readiness.health.problems():
                # a plain-text answer as Hermes' own, which names what is down
                state = b"NOT_READY" if path == _READY else b"DOWN"
                request.respond(503, body=state + b": " + "; ".join(problems).encode(), content_type=TEXT)
            elif path == _READY:
                ready = self._readiness.ready
                request.respond(200 if ready else 503, body=b"READY" if ready else b"NOT_READY", content_type=TEXT)
            else:
                request.respond(200, body=b"UP", content_type=TEXT)
        elif path == "/openapi.json":
            if request.method not in ("GET", "HEAD"):
                _not_allowed(request, "GET,HEAD")
            else:
                request.respond(200, body=DOCUMENT_JSON, content_type=JSON)
        elif self._offload is not None and path.startswith(OFFLOAD_PREFIX):
            self._offload(request)
        else:
            _not_found(request)

    def _scrape(self, request: Request) -> None:
        """Metrics name topics: while authentication is on, only an authenticated caller scrapes them."""
        authenticator = self._access.authenticator
        authorization = request.headers.get("authorization")
        if authenticator is None or (authorization is not None and authenticator.known(authorization) is not None):
            request.respond(200, body=self._exposition(), content_type=CONTENT_TYPE_LATEST)
            return

        async def check_and_scrape() -> None:
            assert authenticator is not None
            try:
                await authenticator.authenticate(authorization, request.client)
            except HermesError as exc:
                headers = self._access.challenge(exc)
                request.respond(exc.status, headers, body=orjson.dumps(exc.to_body()), content_type=JSON)
                return
            request.respond(200, body=self._exposition(), content_type=CONTENT_TYPE_LATEST)

        task = asyncio.get_running_loop().create_task(check_and_scrape())
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    def _publish(self, request: Request, name: str) -> None:
        started = time.perf_counter()
        message_id = new_message_id()
        traced = None if self._tracing is None else self._tracing.publish(name, message_id, request.headers)
        answer = functools.partial(self._answer, request, name, message_id, started, traced)
        try:
            caller = self._access.identify_now(request.headers.get("authorization"))
            topic = self._cache.topic(name)
            if topic is None or isinstance(caller, Unchecked):
                self._publish_later(request, name, message_id, answer, caller)
                return
            self._access.check(topic, caller)
            self._publisher.publish(topic, message_id, request.spooled or request.body, request.headers, answer)
        except HermesError as exc:
            answer(exc)

    def _publish_later(
        self, request: Request, name: str, message_id: str, answer: functools.partial[None], caller: Caller | Unchecked
    ) -> None:
        """Credentials to check first, or a topic the cache does not know (yet): looked up in the store, as a task."""

        async def check_and_publish() -> None:
            try:
                if isinstance(caller, Unchecked):
                    known = await self._access.identify(request.headers.get("authorization"), request.client)
                else:
                    known = caller
                topic = await self._topics.get(name)
                self._access.check(topic, known)
                self._publisher.publish(topic, message_id, request.spooled or request.body, request.headers, answer)
            except HermesError as exc:
                answer(exc)

        task = asyncio.get_running_loop().create_task(check_and_publish())
        self._lookups.add(task)
        task.add_done_callback(self._lookups.discard)

    def _answer(
        self,
        request: Request,
        name: str,
        message_id: str,
        started: float,
        traced: Callable[[int, bool], None] | None,
        outcome: PublishResult | Exception,
    ) -> None:
        headers: tuple[tuple[str, str], ...] = ((MESSAGE_ID_HEADER, message_id),)
        if isinstance(outcome, PublishResult):
            status = 201 if outcome.acknowledged else 202
            if outcome.replayed:  # the first publish's id; nothing was published now
                headers = ((MESSAGE_ID_HEADER, outcome.message_id), _REPLAYED)
            else:
                self._published.count(name)
            request.respond(status, headers)
        elif isinstance(outcome, HermesError):
            status = outcome.status
            headers += self._access.challenge(outcome)
            request.respond(status, headers, body=orjson.dumps(outcome.to_body()), content_type=JSON)
        else:
            status = 500
            log.error("unhandled error publishing to %s", name, exc_info=outcome)
            request.respond(status, headers, body=error_body("internal error", "INTERNAL_ERROR"), content_type=JSON)
        # a stranger's made-up names must not become metric labels (nor span names)
        known = status not in _UNLABELLED
        PUBLISH_REQUESTS.record(name if known else "unknown", status, time.perf_counter() - started)
        if traced is not None:
            traced(status, known)


def _not_found(request: Request) -> None:
    request.respond(404, body=error_body("Not Found", "NOT_FOUND"), content_type=JSON)


def _not_allowed(request: Request, allow: str) -> None:
    request.respond(
        405, (("Allow", allow),), body=error_body("Method Not Allowed", "METHOD_NOT_ALLOWED"), content_type=JSON
    )

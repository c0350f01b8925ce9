"""``/status/health`` and ``/status/prometheus``, served by every process. Metrics name topics and
subscriptions, so while authentication is on a scrape must authenticate (``guard``, docs/security.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hermes.http.server import error_middleware, json_response

# Checks a scrape's credentials: None lets it through, a response refuses it.
ScrapeGuard = Callable[[web.Request], Awaitable[web.StreamResponse | None]]
_GUARD: web.AppKey[ScrapeGuard] = web.AppKey("scrape guard")


def register(router: web.UrlDispatcher) -> None:
    """The status routes of an aiohttp app (the publishing port's own server serves the same ones)."""
    router.add_get("/status/health", health)
    router.add_get("/status/ready", health)
    router.add_get("/status/prometheus", prometheus)


def status_app(guard: ScrapeGuard | None) -> web.Application:
    """A bare status server, for roles that have no API of their own (the consumers, the pipeline); ``guard``
    None: scrapes are open (authentication is off)."""
    app = web.Application(middlewares=[error_middleware])
    if guard is not None:
        app[_GUARD] = guard
    register(app.router)
    return app


async def health(_: web.Request) -> web.Response:
    return json_response({"status": "UP"})


async def prometheus(request: web.Request) -> web.StreamResponse:
    guard = request.app.get(_GUARD)
    if guard is not None and (refused := await guard(request)) is not None:
        return refused
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

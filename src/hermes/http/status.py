"""``/status/health`` and ``/status/prometheus``, served by every process. Metrics name topics and
subscriptions, so while authentication is on a scrape must authenticate (``guard``, docs/security.md). Health
is 503 while a part the process runs is down (``Health``: under ``hermes run``, the embedded broker)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hermes.http.server import error_middleware, json_response

# Checks a scrape's credentials: None lets it through, a response refuses it.
ScrapeGuard = Callable[[web.Request], Awaitable[web.StreamResponse | None]]
_GUARD: web.AppKey[ScrapeGuard] = web.AppKey("scrape guard")


class Health:
    """The problems of this process, each named by a check that returns None while its part is up."""

    def __init__(self) -> None:
        self._checks: list[Callable[[], str | None]] = []

    def add(self, check: Callable[[], str | None]) -> None:
        self._checks.append(check)

    def problems(self) -> list[str]:
        return [problem for check in self._checks if (problem := check()) is not None]


HEALTH: web.AppKey[Health] = web.AppKey("health")


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


async def health(request: web.Request) -> web.Response:
    problems = request.app[HEALTH].problems() if HEALTH in request.app else []
    if problems:
        return json_response({"status": "DOWN", "problems": problems}, status=503)
    return json_response({"status": "UP"})


async def prometheus(request: web.Request) -> web.StreamResponse:
    guard = request.app.get(_GUARD)
    if guard is not None and (refused := await guard(request)) is not None:
        return refused
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

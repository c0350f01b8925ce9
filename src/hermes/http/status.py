"""``/status/health`` and ``/status/prometheus``, served by every process."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hermes.http.server import error_middleware, json_response


def register(router: web.UrlDispatcher) -> None:
    """The status routes of an aiohttp app (the publishing port's own server serves the same ones)."""
    router.add_get("/status/health", health)
    router.add_get("/status/ready", health)
    router.add_get("/status/prometheus", prometheus)


def status_app() -> web.Application:
    """A bare status server, for roles that have no API of their own (the consumers)."""
    app = web.Application(middlewares=[error_middleware])
    register(app.router)
    return app


async def health(_: web.Request) -> web.Response:
    return json_response({"status": "UP"})


async def prometheus(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

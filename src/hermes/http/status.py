"""``/status/health`` and ``/status/prometheus``, served by every process."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hermes.http.server import error_middleware, json_response


def register(router: web.UrlDispatcher, wrap: Callable[[Handler], Handler] = lambda handler: handler) -> None:
    """The status routes; ``wrap`` wraps each handler (``shaped``, in an app without ``error_middleware``)."""
    router.add_get("/status/health", wrap(health))
    router.add_get("/status/ready", wrap(health))
    router.add_get("/status/prometheus", wrap(prometheus))


def status_app() -> web.Application:
    """A bare status server, for roles that have no API of their own (the consumers)."""
    app = web.Application(middlewares=[error_middleware])
    register(app.router)
    return app


async def health(_: web.Request) -> web.Response:
    return json_response({"status": "UP"})


async def prometheus(_: web.Request) -> web.Response:
    return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

"""JSON responses, the one error shape ``{"message", "code"}``, and starting a server on a port."""

from __future__ import annotations

import logging
import ssl
from typing import Any

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler

from hermes.errors import FormattingError, HermesError, StartupError

log = logging.getLogger(__name__)

JSON = "application/json"


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type=JSON, headers=headers)


def error_response(error: HermesError) -> web.Response:
    return json_response(error.to_body(), status=error.status)


_HTTP_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "MESSAGE_TOO_LARGE", 415: "UNSUPPORTED_MEDIA_TYPE"}


def error_answer(request: web.Request, exc: Exception) -> web.StreamResponse:
    """The response to what a handler raised, in the error shape (an HTTP redirect is raised on)."""
    if isinstance(exc, HermesError):
        return error_response(exc)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        body = {"message": exc.reason, "code": _HTTP_CODES.get(exc.status, "HTTP_ERROR")}
        return json_response(
            body, status=exc.status, headers={k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        )
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    return json_response({"message": "internal error", "code": "INTERNAL_ERROR"}, status=500)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Exception as exc:
        return error_answer(request, exc)


async def read_json(request: web.Request) -> Any:
    """The request body as JSON; a body that is not JSON is a 400 FORMAT_ERROR."""
    raw = await request.read()
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as exc:
        raise FormattingError(f"the body is not valid JSON: {exc}") from None


class Server:
    """One aiohttp application listening on host:port (port 0 picks a free one)."""

    def __init__(
        self, app: web.Application, host: str, port: int, what: str, tls: ssl.SSLContext | None = None
    ) -> None:
        self.app = app
        self.tls = tls
        self.host = host
        self.port = port
        self.what = what
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True, backlog=1024, ssl_context=self.tls)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise StartupError(f"the {self.what} cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        server = site._server
        if server is not None and self.port == 0:
            self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        log.info("%s listening on %s://%s:%d", self.what, "https" if self.tls else "http", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

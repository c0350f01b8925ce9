"""JSON responses, the one error shape ``{"message", "code"}``, and starting a server on a port, within the edge's
limits (``http/edge.py``)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any, cast

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler

from hermes.errors import FormattingError, HermesError, RequestTimeout, StartupError
from hermes.http.edge import DEFAULT_LIMITS, LINGER, MAX_FIELD_BYTES, EdgeLimits, make_room

log = logging.getLogger(__name__)

JSON = "application/json"
EDGE_LIMITS = web.AppKey("edge_limits", EdgeLimits)


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type=JSON, headers=headers)


def error_response(error: HermesError) -> web.Response:
    """The error's answer; with a ``Retry-After`` when the error says when trying again is worth it."""
    retry_after: float | None = getattr(error, "retry_after", None)
    headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after is not None else None
    return json_response(error.to_body(), status=error.status, headers=headers)


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
    if isinstance(exc, ConnectionError):  # the client went away: nobody reads the answer
        log.debug("the client of %s %s went away: %s", request.method, request.path, exc)
        return json_response({"message": "the client went away", "code": "CLIENT_GONE"}, status=400)
    log.error("unhandled error on %s %s", request.method, request.path, exc_info=exc)
    return json_response({"message": "internal error", "code": "INTERNAL_ERROR"}, status=500)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Exception as exc:
        return error_answer(request, exc)


async def read_body(request: web.Request) -> bytes:
    """The request's body, if it arrives within the body deadline (else a 408, and the connection closes)."""
    limits = request.app.get(EDGE_LIMITS, DEFAULT_LIMITS)
    loop = asyncio.get_running_loop()
    started = loop.time()
    reading = asyncio.ensure_future(request.read())
    try:
        while not reading.done():
            late = limits.body_deadline(started, request.content.total_bytes) - loop.time()
            if late <= 0:
                raise RequestTimeout(
                    f"the request's body took over {limits.body_timeout:g} s plus 1 s per {limits.body_min_rate} bytes"
                )
            await asyncio.wait({reading}, timeout=late)
        return reading.result()
    finally:
        reading.cancel()


async def read_json(request: web.Request) -> Any:
    """The request body as JSON; a body that is not JSON is a 400 FORMAT_ERROR."""
    raw = await read_body(request)
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError as exc:
        raise FormattingError(f"the body is not valid JSON: {exc}") from None


class _ServerLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's log of a connection: what clients do wrong (malformed requests, going away) is expected of them,
    a DEBUG line; anything else stays an ERROR."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        error = exc_info if isinstance(exc_info, BaseException) else None
        expected = isinstance(error, HttpProcessingError | ConnectionError)
        self.log(logging.DEBUG if expected else logging.ERROR, msg, *args, exc_info=exc_info, **kwargs)


class _Watched(asyncio.Protocol):
    """An aiohttp connection whose client's deadlines are kept: it passes everything on to aiohttp's handler and
    notes when the client sends; ``_watch_middleware`` notes when a request is in the application's hands."""

    def __init__(self, edge: _Edge, handler: web.RequestHandler) -> None:
        self._edge = edge
        self._handler = handler
        self.transport: asyncio.Transport | None = None
        self.since = edge.loop.time()  # of the wait for the next request, or of its head once it began
        self.answered = False  # a request was answered: the wait is keep-alive
        self.in_head = False
        self.handling = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if not self._edge.admit(self):
            self.transport.write(_raw_error(503, "Service Unavailable", "TOO_MANY_CONNECTIONS"))
            self.transport.close()
            self.transport = None
            return
        self._handler.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._edge.connections.discard(self)
        if self.transport is not None:
            self.transport = None
            self._handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.handling and not self.in_head:
            self.in_head = True
            if self.answered:  # a keep-alive request's head counts from its first byte
                self.since = self._edge.loop.time()
        self._handler.data_received(data)

    def eof_received(self) -> None:
        self._handler.eof_received()

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()

    @property
    def idle(self) -> bool:
        return not self.handling and not self.in_head

    def begin(self) -> None:
        self.handling, self.in_head = True, False

    def end(self) -> None:
        self.handling, self.answered, self.since = False, True, self._edge.loop.time()

    def keep_deadlines(self, now: float, limits: EdgeLimits) -> None:
        """The head's deadline and the idle connection's; the body's is read_body's."""
        if self.transport is None or self.handling:
            return
        if self.in_head and now > self.since + limits.header_timeout:
            self.transport.write(_raw_error(408, "Request Timeout", "REQUEST_TIMEOUT"))
            self.transport.close()
        elif not self.in_head and now > self.since + (
            limits.keepalive_timeout if self.answered else limits.header_timeout
        ):
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _raw_error(status: int, reason: str, code: str) -> bytes:
    """An answer outside aiohttp: no request was handed to it."""
    body = orjson.dumps({"message": reason, "code": code})
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {JSON}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


@web.middleware
async def _watch_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    transport = request.transport
    watched = transport.get_protocol() if transport is not None else None
    if not isinstance(watched, _Watched):
        return await handler(request)
    watched.begin()
    try:
        return await handler(request)
    finally:
        watched.end()


class _Edge:
    """The connections of one aiohttp port, their deadlines and their number."""

    def __init__(self, limits: EdgeLimits, what: str) -> None:
        self.limits = limits
        self.what = what
        self.loop = asyncio.get_running_loop()
        self.connections: set[_Watched] = set()
        self._timer = self.loop.call_later(limits.tick, self._tick)

    def _tick(self) -> None:
        now = self.loop.time()
        for connection in list(self.connections):
            connection.keep_deadlines(now, self.limits)
        self._timer = self.loop.call_later(self.limits.tick, self._tick)

    def admit(self, connection: _Watched) -> bool:
        """At the limit, the longest idle connection makes room; with none idle, the new one is refused."""
        if not make_room(self.connections, self.limits.max_connections, lambda c: c.since, self.what):
            return False
        self.connections.add(connection)
        return True

    def stop(self) -> None:
        self._timer.cancel()


class Server:
    """One aiohttp application listening on host:port (port 0 picks a free one), within ``limits``."""

    def __init__(
        self,
        app: web.Application,
        host: str,
        port: int,
        what: str,
        tls: ssl.SSLContext | None = None,
        limits: EdgeLimits = DEFAULT_LIMITS,
    ) -> None:
        app[EDGE_LIMITS] = limits
        app.middlewares.insert(0, _watch_middleware)
        self.app = app
        self.tls = tls
        self.host = host
        self.port = port
        self.what = what
        self.limits = limits
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._edge: _Edge | None = None

    async def start(self) -> int:
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=self.limits.keepalive_timeout,
            max_line_size=MAX_FIELD_BYTES,
            max_field_size=MAX_FIELD_BYTES,
            lingering_time=LINGER,
            logger=_ServerLog(logging.getLogger("aiohttp.server")),
        )
        await self._runner.setup()
        handlers = self._runner.server
        assert handlers is not None
        edge = self._edge = _Edge(self.limits, self.what)
        loop = asyncio.get_running_loop()
        try:
            self._listener = await loop.create_server(
                lambda: _Watched(edge, handlers()), self.host, self.port, reuse_address=True, backlog=1024, ssl=self.tls
            )
        except OSError as exc:
            await self.stop()
            raise StartupError(f"the {self.what} cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        self.port = int(self._listener.sockets[0].getsockname()[1])
        log.info("%s listening on %s://%s:%d", self.what, "https" if self.tls else "http", self.host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
        if self._edge is not None:
            self._edge.stop()
        if self._runner is not None:
            await self._runner.cleanup()  # answers the requests in progress, closes the connections
            self._runner = None
        if self._listener is not None:
            await self._listener.wait_closed()
            self._listener = None

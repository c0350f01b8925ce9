"""A lean HTTP/1.1 server for the publishing port: httptools' parser on an asyncio protocol, no framework.

aiohttp spent about 60% of a publish's CPU in its own request handling (docs/benchmarks.md); here a request costs
a handful of parser callbacks and one write. The handler is a plain function that must call ``request.respond``
once, now or later (no coroutine or task per request). Pipelined requests are answered in order: the next one is
handed to the handler only when the previous one has been answered. Bodies may be sized or chunked; ``Expect:
100-continue`` is honoured; a malformed request is a 400, a URL or header over 8190 bytes (or a head over 64 KiB) a
414 or 431, a body over ``max_body`` a 413, a request not whole within its deadlines a 408, all in Hermes' error shape,
and the connection is closed after them. Idle connections are closed after the keep-alive timeout, and a port holds
at most ``limits.max_connections`` (``http/edge.py``).

A body whose Content-Length exceeds ``spool_above`` (decided when the headers are complete, so small requests pay
nothing) is written to a file in ``spool_dir`` as it arrives instead of being held; a chunked one goes to a file once
it has grown past ``spool_above``, with what it held until then. The handler gets it as
``request.spooled``, and the file is removed once the request is answered. ``request.stream`` answers with a body
read from chunks, written as the client takes them.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import socket
import ssl
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, cast

import httptools
import orjson

from hermes.errors import StartupError
from hermes.http.edge import DEFAULT_LIMITS, LINGER, MAX_FIELD_BYTES, MAX_HEAD_BYTES, EdgeLimits, make_room

log = logging.getLogger(__name__)

REASONS = {
    100: "Continue",
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Payload Too Large",
    414: "URI Too Long",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
DEFAULT_MAX_BODY = 64 * 1024 * 1024
DEFAULT_SPOOL_ABOVE = 1024 * 1024
# A streamed answer waits for the client while more than this is buffered for it.
_STREAM_BUFFER = 1024 * 1024
# Pipelined requests waiting behind an unanswered one before the connection stops reading.
_QUEUED_MAX = 16
# Where the parser is in the request it reads: between requests, in the line and headers, in the body.
_IDLE, _HEAD, _BODY = range(3)


class SpooledBody:
    """A large request body in a file, written as it arrived (removed once its request is answered)."""

    __slots__ = ("path", "size")

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size

    def read(self) -> bytes:
        """The whole body in memory (its one copy)."""
        return self.path.read_bytes()

    def chunks(self, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """The body in chunks (blocking reads: for a thread)."""
        with self.path.open("rb") as source:
            while chunk := source.read(chunk_size):
                yield chunk

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


class Request:
    """One parsed request. ``headers`` are keyed by lower-case name (the first of repeated names wins). A spooled
    body is ``spooled`` and ``body`` is empty."""

    __slots__ = ("_connection", "body", "headers", "method", "path", "spooled")

    def __init__(
        self,
        connection: _Connection,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        spooled: SpooledBody | None = None,
    ) -> None:
        self._connection = connection
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.spooled = spooled

    @property
    def client(self) -> str:
        """The client's address (what failed logins are counted by)."""
        return self._connection.client

    def respond(
        self, status: int, headers: Iterable[tuple[str, str]] = (), body: bytes = b"", content_type: str = ""
    ) -> None:
        """Answers this request (once; later calls and calls after the client went away do nothing)."""
        self._connection.respond(self, status, headers, body, content_type)

    async def stream(
        self,
        status: int,
        headers: Iterable[tuple[str, str]],
        size: int,
        chunks: AsyncIterator[bytes],
        content_type: str = "",
    ) -> None:
        """Answers with a body of ``size`` bytes taken from ``chunks`` as the client reads it."""
        await self._connection.stream(self, status, headers, size, chunks, content_type)


Handler = Callable[[Request], None]


def error_body(message: str, code: str) -> bytes:
    return orjson.dumps({"message": message, "code": code})


class _Clock:
    """The Date header, formatted once a second by the server's timer, not once per response."""

    def __init__(self) -> None:
        self.date = b""
        self.tick()

    def tick(self) -> None:
        self.date = email.utils.formatdate(usegmt=True).encode()


class _Connection(asyncio.Protocol):
    def __init__(self, server: LeanServer) -> None:
        self._server = server
        self._loop = server.loop
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._spool: IO[bytes] | None = None  # the file of a large body being received
        self._drained: asyncio.Future[None] | None = None  # a streamed answer waiting for the client
        self._current: Request | None = None  # handed to the handler, not answered yet
        self._queued: deque[Request] = deque()
        self._keep_alive = True
        self._closing = False
        self._lingering_until = 0.0  # after a refusal, reading on until the client has the answer
        self._paused = False
        self._phase = _IDLE
        self._phase_since = self.idle_since = self._loop.time()  # the first request's head counts from here
        self._head_bytes = 0  # of the head being read, counted by whole chunks (the parser does not say where it ends)
        self._begun = 0  # requests begun
        self.client = ""

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if peer else ""
        if not self._server.admit():
            self._refuse(503, "TOO_MANY_CONNECTIONS", "the server holds as many connections as it may; try again")
        self._server.connections.add(self)  # a refused one too, until its lingering ends

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        self._transport = None
        self._drop_spool()
        for request in self._queued:
            if request.spooled is not None:
                request.spooled.discard()
        self._queued.clear()
        if self._current is not None and self._current.spooled is not None:
            self._current.spooled.discard()
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        in_head, begun = self._phase == _HEAD, self._begun
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._keep_alive = False  # no protocol switch here: answer what was asked, then close
        except httptools.HttpParserError as exc:
            refusal = exc.__context__  # what a callback raised
            if isinstance(refusal, _Refusal):
                self._refuse(*refusal.args)
            else:
                self._refuse(400, "BAD_REQUEST", f"malformed HTTP request: {exc}")
        else:
            # A chunk read wholly inside one head counts: the parser gathers a header's pieces until it ends
            if in_head and self._phase == _HEAD and begun == self._begun:
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._refuse(431, "REQUEST_HEADER_FIELDS_TOO_LARGE", f"the headers exceed {MAX_HEAD_BYTES} bytes")

    def pause_writing(self) -> None:
        self._pause()

    def resume_writing(self) -> None:
        self._resume()
        self._wake()

    def _wake(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    # --- httptools callbacks ---

    def on_message_begin(self) -> None:
        if self._begun:  # a keep-alive request's head counts from its first byte
            self._phase_since = self._loop.time()
        self._begun += 1
        self._phase, self._head_bytes = _HEAD, 0
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0
        self._drop_spool()

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > MAX_FIELD_BYTES:
            raise _Refusal(414, "URI_TOO_LONG", f"the URL exceeds {MAX_FIELD_BYTES} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) + len(value) > MAX_FIELD_BYTES:
            raise _Refusal(
                431, "REQUEST_HEADER_FIELDS_TOO_LARGE", f"a header exceeds {MAX_FIELD_BYTES} bytes: {name[:100]!r}"
            )
        key = name.decode("latin-1").lower()
        if key not in self._headers:
            self._headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._phase, self._phase_since = _BODY, self._loop.time()
        length = self._headers.get("content-length")
        if length is not None and length.isdigit():
            if int(length) > self._server.max_body:
                raise self._too_large()
            spool_dir = self._server.spool_dir
            if spool_dir is not None and int(length) > self._server.spool_above:
                self._spool = self._open_spool(spool_dir)
        if self._headers.get("expect", "").lower() == "100-continue" and self._transport is not None:
            self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._server.max_body:
            raise self._too_large()
        if self._spool is not None:
            self._spool.write(body)
        else:
            self._body.append(body)
            if self._body_size > self._server.spool_above and self._server.spool_dir is not None:
                self._spool = self._open_spool(self._server.spool_dir)  # a chunked body grown large
                self._spool.writelines(self._body)
                self._body = []

    def _too_large(self) -> _Refusal:
        return _Refusal(413, "MESSAGE_TOO_LARGE", f"the body exceeds {self._server.max_body} bytes")

    @staticmethod
    def _open_spool(spool_dir: Path) -> IO[bytes]:
        return (spool_dir / f"{os.getpid()}.{uuid.uuid4().hex}.body").open("wb")

    def on_message_complete(self) -> None:
        self._phase = _IDLE
        url = self._url
        path = url.split(b"?", 1)[0].decode("latin-1") if b"?" in url else url.decode("latin-1")
        spooled = None
        if self._spool is not None:
            self._spool.close()
            spooled = SpooledBody(Path(self._spool.name), self._body_size)
            self._spool = None
        body = b"".join(self._body) if spooled is None else b""
        request = Request(self, self._parser.get_method().decode(), path, self._headers, body, spooled)
        if not self._parser.should_keep_alive():
            self._keep_alive = False
        if self._current is None:
            self._dispatch(request)
        else:
            self._queued.append(request)
            if len(self._queued) >= _QUEUED_MAX:
                self._pause()

    # --- answering ---

    def _dispatch(self, request: Request) -> None:
        self._current = request
        try:
            self._server.handler(request)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            self.respond(request, 500, (), error_body("internal error", "INTERNAL_ERROR"), "application/json")

    def respond(
        self, request: Request, status: int, headers: Iterable[tuple[str, str]], body: bytes, content_type: str
    ) -> None:
        if request is not self._current:
            return  # answered already
        self._current = None
        if request.spooled is not None:
            request.spooled.discard()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        head = self._head(request, status, headers, len(body), content_type)
        if request.method != "HEAD":
            head.append(body)
        transport.write(b"".join(head))
        self._answered()

    async def stream(
        self,
        request: Request,
        status: int,
        headers: Iterable[tuple[str, str]],
        size: int,
        chunks: AsyncIterator[bytes],
        content_type: str,
    ) -> None:
        if request is not self._current or self._transport is None or self._transport.is_closing():
            return
        transport = self._transport
        transport.write(b"".join(self._head(request, status, headers, size, content_type)))
        sent = 0
        if request.method != "HEAD":
            try:
                async for chunk in chunks:
                    if transport.is_closing():
                        return  # the client went away
                    transport.write(chunk)
                    sent += len(chunk)
                    if transport.get_write_buffer_size() > _STREAM_BUFFER:
                        self._drained = self._loop.create_future()
                        await self._drained
                        self._drained = None
            except Exception:
                log.exception("a streamed answer to %s %s failed after %d bytes", request.method, request.path, sent)
            if sent != size:  # the client must not take a short body for a whole one: it sees the connection close
                log.error("a streamed answer to %s %s had %d bytes, not %d", request.method, request.path, sent, size)
                transport.close()
                return
        if request is self._current:
            self._current = None
            self._answered()

    def _head(
        self, request: Request, status: int, headers: Iterable[tuple[str, str]], size: int, content_type: str
    ) -> list[bytes]:
        if self._server.draining:
            self._keep_alive = False
        last = not self._keep_alive and not self._queued
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\n".encode()]
        for name, value in headers:
            head.append(f"{name}: {value}\r\n".encode("latin-1"))
        if content_type:
            head.append(f"Content-Type: {content_type}\r\n".encode())
        head.append(b"Content-Length: %d\r\nDate: %s\r\n" % (size, self._server.clock.date))
        if last:
            head.append(b"Connection: close\r\n")
        head.append(b"\r\n")
        return head

    def _answered(self) -> None:
        """After an answer went out: closes the connection, or hands on the next pipelined request."""
        transport = self._transport
        if transport is None:
            return
        last = not self._keep_alive and not self._queued
        if last:
            self._closing = True
            transport.close()
        elif self._queued:
            if self._paused and len(self._queued) < _QUEUED_MAX:
                self._resume()
            self._dispatch(self._queued.popleft())
        else:
            self.idle_since = self._loop.time()

    def _drop_spool(self) -> None:
        """A large body that will not be handed out (the client went away or sent something bad)."""
        if self._spool is not None:
            self._spool.close()
            Path(self._spool.name).unlink(missing_ok=True)
            self._spool = None

    def _refuse(self, status: int, code: str, message: str) -> None:
        """A request that cannot be parsed or taken: answered after those before it, then the connection closes."""
        self._closing, self._keep_alive = True, False
        self._drop_spool()
        for request in self._queued:
            if request.spooled is not None:
                request.spooled.discard()
        self._queued.clear()
        transport = self._transport
        if transport is None or self._current is not None:
            return  # the answer to the earlier request in progress closes the connection
        body = error_body(message, code)
        head = (
            f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        transport.write(head.encode() + body)
        if transport.can_write_eof():
            # Closing with the client's data unread would reset the connection, and the reset may destroy the
            # answer before the client reads it: the writing side shuts, and what still comes is dropped a while
            transport.write_eof()
            self._lingering_until = self._loop.time() + LINGER
        else:
            transport.close()

    def _pause(self) -> None:
        if not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def _resume(self) -> None:
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()

    @property
    def idle(self) -> bool:
        """Between requests, with nothing to answer."""
        return self._phase == _IDLE and self._current is None and not self._queued

    def close_if_idle(self) -> None:
        if self.idle and self._transport is not None:  # not one whose request is still arriving
            self._transport.close()

    def keep_deadlines(self, now: float, limits: EdgeLimits) -> None:
        """Closes the connection when its client is late: with a 408 in a request, quietly between requests."""
        if self._transport is None or self._paused:
            return  # paused: the server, not the client, is behind
        if self._closing:  # lingering after a refusal; else the answer in progress closes the connection
            if self._lingering_until and now > self._lingering_until:
                self._transport.close()
            return
        if self._phase == _HEAD and now > self._phase_since + limits.header_timeout:
            self._refuse(408, "REQUEST_TIMEOUT", f"the request's headers took over {limits.header_timeout:g} s")
        elif self._phase == _BODY and now > limits.body_deadline(self._phase_since, self._body_size):
            self._refuse(
                408,
                "REQUEST_TIMEOUT",
                f"the request's body took over {limits.body_timeout:g} s plus 1 s per {limits.body_min_rate} bytes",
            )
        elif self.idle:
            wait = limits.keepalive_timeout if self._begun else limits.header_timeout
            if now > self.idle_since + wait:
                self._closing = True
                self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.close()


class _Refusal(Exception):
    """A request refused from a parser callback: status, code, message."""


class LeanServer:
    """Serves ``handler`` on host:port (port 0 picks a free one). ``reuse_port``: several processes listen on
    the same port, and the kernel spreads the connections among them (``hermes frontend --workers``). ``spool_dir``:
    where bodies over ``spool_above`` bytes are written as they arrive (None: every body is held in memory)."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        what: str,
        max_body: int = DEFAULT_MAX_BODY,
        limits: EdgeLimits = DEFAULT_LIMITS,
        reuse_port: bool = False,
        tls: ssl.SSLContext | None = None,
        spool_dir: Path | None = None,
        spool_above: int = DEFAULT_SPOOL_ABOVE,
    ) -> None:
        self.spool_dir = spool_dir
        self.spool_above = spool_above
        self.handler = handler
        self.tls = tls
        self.host = host
        self.port = port
        self.what = what
        self.max_body = max_body
        self.clock = _Clock()
        self.connections: set[_Connection] = set()
        self.limits = limits
        self._reuse_port = reuse_port
        self._server: asyncio.Server | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.draining = False  # stopping: every answer closes its connection
        self.loop: asyncio.AbstractEventLoop  # set by start(), before any connection

    async def start(self) -> int:
        self.loop = asyncio.get_running_loop()
        options: dict[str, Any] = {"reuse_port": True} if self._reuse_port else {"reuse_address": True}
        try:
            self._server = await self.loop.create_server(
                lambda: _Connection(self), self.host, self.port, backlog=1024, ssl=self.tls, **options
            )
        except OSError as exc:
            raise StartupError(f"the {self.what} cannot listen on {self.host}:{self.port}: {exc.strerror}") from None
        sock: socket.socket = self._server.sockets[0]
        self.port = int(sock.getsockname()[1])
        self._timer = self.loop.call_later(self.limits.tick, self._tick)
        log.info("%s listening on %s://%s:%d", self.what, "https" if self.tls else "http", self.host, self.port)
        return self.port

    def _tick(self) -> None:
        self.clock.tick()
        now = self.loop.time()
        for connection in list(self.connections):
            connection.keep_deadlines(now, self.limits)
        self._timer = self.loop.call_later(self.limits.tick, self._tick)

    def admit(self) -> bool:
        """Room for one more connection: at the limit, the longest idle one is closed; none idle, none admitted."""
        return make_room(self.connections, self.limits.max_connections, lambda c: c.idle_since, self.what)

    def drain(self) -> None:
        """Serves on, but every answer closes its connection: clients leave for new connections, which find the
        port closed once ``stop`` closed it, rather than sending on a kept-alive connection as it closes."""
        self.draining = True

    async def stop(self, grace: float = 5.0) -> None:
        """Stops accepting, lets the requests in progress be answered (``grace`` seconds at most), closes."""
        if self._server is None:
            return
        self.draining = True
        self._server.close()
        if self._timer is not None:
            self._timer.cancel()
        deadline = self.loop.time() + grace
        while self.loop.time() < deadline:
            for connection in list(self.connections):
                connection.close_if_idle()
            if not self.connections:
                break
            await asyncio.sleep(0.02)
        for connection in list(self.connections):
            connection.abort()
        await self._server.wait_closed()
        self._server = None

"""A lean HTTP/1.1 keep-alive client for pushing messages to subscribers.

The consumers' hot path is one POST per message. aiohttp's client spent about 170 µs of CPU per request here,
this one about 45 µs (docs/benchmarks.md, "Profiles"), so it replaces it for deliveries. It does only what
deliveries need: POST with a body, keep-alive pools per (scheme, host, port), TLS, responses delimited by
Content-Length, chunked encoding or the end of the connection, a total and an idle (socket) timeout.
It does not follow redirects: a 3xx is an answer like any other. A body kept in a file (``hermes.http.streamed``)
is written a chunk at a time, each once the connection has taken the one before.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import cast
from urllib.parse import urlsplit

from hermes.errors import EndpointProtocolError
from hermes.http.streamed import Body, StreamedBody

_MAX_HEAD = 64 * 1024
# Bodies larger than this are written apart from their head (one write of the two joined for the rest).
_SEPARATE_BODY = 64 * 1024


# Not frozen: one is built per delivery, and a frozen dataclass is built with one object.__setattr__ per field
@dataclass(slots=True)
class Response:
    status: int
    headers: Mapping[str, str]  # names in lower case
    body: bytes


@dataclass(frozen=True)
class _Target:
    key: tuple[str, str, int]  # scheme, host, port: the pool's
    request_line: str  # the request line (path with the query) and Host, up to the Content-Length's value


@lru_cache(maxsize=4096)
def _target(url: str) -> _Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EndpointProtocolError(f"cannot send to {parts.scheme}://{parts.hostname}")
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = shown if port == default else f"{shown}:{port}"
    return _Target((parts.scheme, host, port), f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nContent-Length: ")


class _Connection(asyncio.Protocol):
    """One connection; parses one response at a time."""

    def __init__(self) -> None:
        # made on the loop (by create_connection): kept, since get_running_loop costs a getpid system call each
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_activity = time.monotonic()
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Response] | None = None
        self._head: tuple[int, dict[str, str]] | None = None
        self._received_any = False
        self._writable = asyncio.Event()
        self._writable.set()
        # one timer in place of an asyncio.timeout around each request (a tenth of a drain's CPU): it fails the
        # waiter at the deadline, or once the answer has been silent for the idle timeout. A request keeps the timer
        # of the one before when it fires no later than its own would (then it looks again): with one subscription's
        # timeouts, a connection arms a timer about once per timeout instead of once per request
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._idle_timeout: float | None = None

    # --- asyncio callbacks ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio subclasses

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        self._received_any = True
        self._buffer += data
        if self._waiter is not None:
            try:
                self._parse(eof=False)
            except EndpointProtocolError as exc:
                self._fail(exc)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._writable.set()  # a writer waiting to go on finds the connection closed
        if self._waiter is not None and not self._waiter.done():
            try:
                self._parse(eof=True)
            except EndpointProtocolError as error:
                self._fail(error)
                return
            if self._waiter is not None:  # still unanswered (an answer read up to the close cleared it)
                self._fail(EndpointProtocolError("the endpoint closed the connection before answering"))

    # --- requests ---

    @property
    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def request(self, data: tuple[bytes, ...], deadline: float, idle: float | None) -> asyncio.Future[Response]:
        """Writes ``data``; the answer's future fails with TimeoutError at ``deadline`` (``time.monotonic``),
        or after ``idle`` seconds without a byte of the answer."""
        assert self.transport is not None
        loop = self._loop
        self._waiter = loop.create_future()
        self._head = None
        self._received_any = False
        self.last_activity = now = time.monotonic()
        self._deadline, self._idle_timeout = deadline, idle
        check = self._next_check(now)
        if self._timer is None or self._timer.when() > loop.time() + check:
            self._stop_timer()
            self._timer = loop.call_later(check, self._check_time)
        self.transport.writelines(data)  # head and body in one system call, not one each
        return self._waiter

    def _next_check(self, now: float) -> float:
        left = self._deadline - now
        if self._idle_timeout is not None:
            left = min(left, self.last_activity + self._idle_timeout - now)
        return max(left, 0.0)

    def _check_time(self) -> None:
        self._timer = None
        if self._waiter is None or self._waiter.done():
            return
        now = time.monotonic()
        if now >= self._deadline:
            self._fail(TimeoutError("no answer from the endpoint within the request timeout"))
        elif self._idle_timeout is not None and now - self.last_activity >= self._idle_timeout:
            self._fail(TimeoutError("no answer from the endpoint within the socket timeout"))
        else:  # bytes came in the meantime: the idle timeout counts from the last of them
            self._timer = self._loop.call_later(self._next_check(now), self._check_time)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def stream(self, body: StreamedBody, answer: asyncio.Future[Response]) -> bool:
        """Writes ``body`` after the head ``request`` wrote; False when the endpoint answered or went away first
        (the connection is then not reusable: the body was cut short)."""
        assert self.transport is not None
        for chunk in body.chunks():  # read from the page cache: short enough for the event loop
            await self._writable.wait()
            if not self.usable or answer.done():
                return False
            self.transport.write(chunk)
            self.last_activity = time.monotonic()  # sending is progress too, for the socket timeout
        return True

    @property
    def received_any(self) -> bool:
        return self._received_any

    def close(self, abort: bool = False) -> None:
        """``abort``: at once, without TLS's closing handshake (which would outlive a stopping event loop)."""
        self.closed = True
        self._stop_timer()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.cancel()  # abandoned (a timeout): nobody will read its outcome
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()

    def _fail(self, exc: Exception) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()

    def _parse(self, eof: bool) -> None:
        while self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > _MAX_HEAD:
                    raise EndpointProtocolError("the response head is too long")
                return
            lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
            del self._buffer[: end + 4]
            status_line = lines[0].split(" ", 2)
            if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or not status_line[1].isdigit():
                raise EndpointProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
            status = int(status_line[1])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise EndpointProtocolError(f"not a header line: {line[:80]!r}")
                headers[name.strip().lower()] = value.strip()
            if 100 <= status < 200:  # 100 Continue and friends: the real answer follows
                continue
            self._head = (status, headers)
            if status_line[0] == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
                headers["connection"] = "close"
        status, headers = self._head
        body: bytes | None
        if status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                raise EndpointProtocolError("the Content-Length is not a number") from None
            body = bytes(self._buffer[:length]) if len(self._buffer) >= length else None
            if body is not None:
                del self._buffer[:length]
        else:  # delimited by the end of the connection
            headers["connection"] = "close"
            body = bytes(self._buffer) if eof else None
        if body is None:
            if eof:
                raise EndpointProtocolError("the endpoint closed the connection in the middle of its answer")
            return
        assert self._waiter is not None
        waiter, self._waiter = self._waiter, None  # the timer stays for the next request (request)
        if not waiter.done():
            waiter.set_result(Response(status, headers, body))

    def _chunked(self) -> bytes | None:
        """The body if all its chunks arrived (the buffer is left untouched until then)."""
        position = 0
        parts: list[bytes] = []
        while True:
            line_end = self._buffer.find(b"\r\n", position)
            if line_end < 0:
                return None
            try:
                size = int(bytes(self._buffer[position:line_end]).split(b";", 1)[0], 16)
            except ValueError:
                raise EndpointProtocolError("a chunk size is not hexadecimal") from None
            start = line_end + 2
            if size == 0:
                trailer_end = self._buffer.find(b"\r\n\r\n", line_end)
                if trailer_end < 0:
                    return None
                del self._buffer[: trailer_end + 4]
                return b"".join(parts)
            if len(self._buffer) < start + size + 2:
                return None
            parts.append(bytes(self._buffer[start : start + size]))
            position = start + size + 2


def _close_late(connecting: asyncio.Task[tuple[asyncio.Transport, _Connection]]) -> None:
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result()[0].close()


class HttpClient:
    """Pools of idle keep-alive connections per (scheme, host, port); no limit on connections (the
    subscription's inflightSize bounds them)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}

    async def post(
        self,
        url: str,
        body: Body,
        headers: Mapping[str, str],
        total: float,
        idle: float | None = None,
    ) -> Response:
        """Raises TimeoutError after ``total`` seconds in all, or ``idle`` seconds without a byte of the
        answer; OSError or EndpointProtocolError when the connection fails."""
        target = _target(url)
        size = body.size if isinstance(body, StreamedBody) else len(body)
        fields = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        encoded = f"{target.request_line}{size}\r\n{fields}\r\n".encode("latin-1")
        data: tuple[bytes, ...] | tuple[bytes, StreamedBody]
        if isinstance(body, StreamedBody):
            data = (encoded, body)
        else:  # a large body is written after its head, not copied behind it
            data = (encoded, body) if len(body) > _SEPARATE_BODY else (encoded + body,)
        deadline = time.monotonic() + total
        key = target.key
        # no asyncio.timeout around it all (its cost is a tenth of a delivery's): connecting and streaming, rare,
        # have one each, and the connection's timer bounds the wait for the answer. An idle connection and a body in
        # memory, the usual case, take no coroutine of their own.
        connection = self._idle_connection(key)
        reused = connection is not None
        if connection is None:
            connection = await self._connect(key, deadline)
        try:
            if len(data) == 1:
                response = await connection.request(data, deadline, idle)
            else:
                response = await self._exchange(connection, data, deadline, idle)
        except EndpointProtocolError:
            connection.close()
            if not reused or connection.received_any:
                raise
            # an idle connection the endpoint had just closed: once more on a new one
            connection = await self._connect(key, deadline)
            try:
                response = await self._exchange(connection, data, deadline, idle)
            except BaseException:
                connection.close()
                raise
        except BaseException:
            connection.close()
            raise
        if response.headers.get("connection", "").lower() == "close" or not connection.usable:
            connection.close()
        else:
            self._idle.setdefault(key, []).append(connection)
        return response

    def _idle_connection(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.usable:
                return connection
        return None

    async def _connect(self, key: tuple[str, str, int], deadline: float) -> _Connection:
        scheme, host, port = key
        context = None
        if scheme == "https":
            context = self._ssl or ssl.create_default_context()
        loop = asyncio.get_running_loop()
        connecting = asyncio.ensure_future(loop.create_connection(_Connection, host, port, ssl=context))
        try:
            async with asyncio.timeout(deadline - time.monotonic()):
                _, protocol = await asyncio.shield(connecting)
        except (asyncio.CancelledError, TimeoutError):
            # uvloop leaves the failed name look-up of a cancelled connect unread ("Future exception was never
            # retrieved"): the connect finishes on its own, and is read and closed then
            connecting.add_done_callback(_close_late)
            raise
        return protocol

    @staticmethod
    async def _exchange(
        connection: _Connection,
        data: tuple[bytes, ...] | tuple[bytes, StreamedBody],
        deadline: float,
        idle_timeout: float | None,
    ) -> Response:
        streamed = data[-1] if isinstance(data[-1], StreamedBody) else None
        if streamed is None:
            return await connection.request(cast(tuple[bytes, ...], data), deadline, idle_timeout)
        waiter = connection.request((data[0],), deadline, idle_timeout)
        async with asyncio.timeout(deadline - time.monotonic()):
            if not await connection.stream(streamed, waiter):
                connection.closed = True  # answered before the whole body went: not reusable
        return await waiter

    async def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close(abort=True)  # idle: nothing in flight to lose
        self._idle.clear()

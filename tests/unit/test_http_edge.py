"""Hostile clients at the HTTP edge, against both kinds of port (the lean publishing server and an aiohttp one, as
management and the status ports): oversized heads, slow and silent clients, too many connections. Short limits;
each case checks that the server answers within its deadline and that an honest client is served meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from hermes.http.edge import EdgeLimits
from hermes.http.lean import LeanServer, Request
from hermes.http.server import Server, error_middleware, read_body

LIMITS = EdgeLimits(header_timeout=0.6, body_timeout=0.6, body_min_rate=1000, keepalive_timeout=0.8, max_connections=4)
HONEST = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nok"


def _lean_handler(request: Request) -> None:
    request.respond(200, body=request.body)


async def _aiohttp_handler(request: web.Request) -> web.Response:
    return web.Response(body=await read_body(request))


@asynccontextmanager
async def _serving(kind: str) -> AsyncIterator[int]:
    server: LeanServer | Server
    if kind == "lean":
        server = LeanServer(_lean_handler, "127.0.0.1", 0, "test server", limits=LIMITS)
    else:
        app = web.Application(middlewares=[error_middleware])
        app.router.add_post("/x", _aiohttp_handler)
        server = Server(app, "127.0.0.1", 0, "test server", limits=LIMITS)
    port = await server.start()
    try:
        yield port
    finally:
        await server.stop()


def _run(kind: str, client: Callable[[int], Awaitable[None]]) -> None:
    async def run() -> None:
        async with _serving(kind) as port:
            await asyncio.wait_for(client(port), 30)

    asyncio.run(run())


async def _exchange(port: int, request: bytes = HONEST) -> bytes:
    """One request on a new connection; the answer's status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        return await reader.readline()
    finally:
        writer.close()


async def _timed_honest(port: int) -> float:
    started = time.monotonic()
    assert (await _exchange(port)).startswith(b"HTTP/1.1 200"), "an honest request failed"
    return time.monotonic() - started


async def _status_and_close(reader: asyncio.StreamReader) -> tuple[bytes, float]:
    """The answer's status line (empty when the server just closed) and the seconds until it came; then the server
    closes the connection (aiohttp after keep-alive time at most: it reads on to the end of an unread body)."""
    started = time.monotonic()
    status = (await reader.readline()).rstrip()
    took = time.monotonic() - started
    with contextlib.suppress(ConnectionResetError):  # closed with bytes of a trickling client unread: a reset
        await reader.read()
    return status, took


KINDS = pytest.mark.parametrize("kind", ["lean", "aiohttp"])


@KINDS
def test_an_oversized_header_is_refused_at_once_and_an_honest_client_is_served(kind: str) -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nX-Big: ")
        answer = asyncio.create_task(reader.readline())
        sent = 0
        try:  # up to 64 MiB, in 1 MiB pieces, until the answer comes: the server refuses long before
            while sent < 64 << 20 and not answer.done():
                writer.write(b"a" * (1 << 20))
                await writer.drain()
                sent += 1 << 20
        except ConnectionError:
            pass
        status = (await answer).rstrip()
        writer.close()
        assert status.split(b" ")[1] == (b"431" if kind == "lean" else b"400")
        assert sent < 8 << 20
        assert await _timed_honest(port) < 1.0

    _run(kind, client)


@KINDS
def test_a_url_or_header_over_8190_bytes_is_refused(kind: str) -> None:
    async def client(port: int) -> None:
        header = await _exchange(port, b"POST /x HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * 8200 + b"\r\n\r\n")
        url = await _exchange(port, b"GET /" + b"a" * 8200 + b" HTTP/1.1\r\nHost: h\r\n\r\n")
        fits = await _exchange(port, b"POST /x HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * 8000 + b"\r\n" + HONEST[27:])
        assert header.split(b" ")[1] == (b"431" if kind == "lean" else b"400")
        assert url.split(b" ")[1] == (b"414" if kind == "lean" else b"400")
        assert fits.startswith(b"HTTP/1.1 200")

    _run(kind, client)


@KINDS
def test_headers_trickled_byte_by_byte_get_a_408_at_the_header_deadline(kind: str) -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def trickle() -> None:
            for byte in b"POST /x HTTP/1.1\r\nHost: h\r\nX-Slow: " + b"s" * 1000:
                writer.write(bytes([byte]))
                await asyncio.sleep(0.02)

        trickling = asyncio.create_task(trickle())
        honest = await _timed_honest(port)  # while the other client trickles
        status, took = await _status_and_close(reader)
        trickling.cancel()
        writer.close()
        assert status == b"HTTP/1.1 408 Request Timeout"
        assert took < LIMITS.header_timeout + 2 * LIMITS.tick + 0.5
        assert honest < 0.5

    _run(kind, client)


@KINDS
def test_a_body_promised_and_never_sent_gets_a_408_at_the_body_deadline(kind: str) -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\nsome")
        status, took = await _status_and_close(reader)
        writer.close()
        assert status == b"HTTP/1.1 408 Request Timeout"
        assert took < LIMITS.body_timeout + 2 * LIMITS.tick + 0.5

    _run(kind, client)


@KINDS
def test_a_body_that_keeps_coming_earns_time_by_its_size(kind: str) -> None:
    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 3000\r\n\r\n")
        for _ in range(10):  # 1.5 s in all, beyond the body timeout; 300 bytes every 0.15 s, the minimum rate
            writer.write(b"b" * 300)
            await asyncio.sleep(0.15)
        status = await reader.readline()
        writer.close()
        assert status.startswith(b"HTTP/1.1 200")

    _run(kind, client)


@KINDS
def test_idle_connections_close_silently_after_their_timeouts(kind: str) -> None:
    async def client(port: int) -> None:
        silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)  # never sends anything
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(HONEST)
        assert (await reader.readuntil(b"ok")).startswith(b"HTTP/1.1 200")  # then keeps the connection idle
        (status, never_sent), (after, kept_alive) = await asyncio.gather(
            _status_and_close(silent_reader), _status_and_close(reader)
        )
        silent.close()
        writer.close()
        assert (status, after) == (b"", b"")
        assert LIMITS.header_timeout - 0.1 < never_sent < LIMITS.header_timeout + 2 * LIMITS.tick + 0.5
        assert LIMITS.keepalive_timeout - 0.1 < kept_alive < LIMITS.keepalive_timeout + 2 * LIMITS.tick + 0.5

    _run(kind, client)


@KINDS
def test_beyond_the_connection_limit_the_longest_idle_makes_room_or_the_new_one_is_refused(kind: str) -> None:
    async def client(port: int) -> None:
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITS.max_connections)]
        assert await _timed_honest(port) < 0.5  # the first idle connection was closed for it
        first, _ = await _status_and_close(idle[0][0])
        assert first == b""
        for _, writer in idle[1:]:  # the others now hold requests in progress, not idle
            writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 9000\r\n\r\nbody")
        busy = [await asyncio.open_connection("127.0.0.1", port)]  # the fourth
        busy[0][1].write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 9000\r\n\r\nbody")
        await asyncio.sleep(0.1)
        refused = await _exchange(port)
        assert refused.startswith(b"HTTP/1.1 503"), refused
        for _, writer in [*idle, *busy]:
            writer.close()

    _run(kind, client)


def test_a_late_pipelined_head_does_not_cut_off_the_answer_in_progress() -> None:
    """The publishing port answers when Kafka acknowledges: the answer before a late head still goes out."""

    def slow(request: Request) -> None:
        asyncio.get_running_loop().call_later(2 * LIMITS.header_timeout, request.respond, 200)

    async def run() -> None:
        server = LeanServer(slow, "127.0.0.1", 0, "test server", limits=LIMITS)
        port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(HONEST + b"POST /x HTTP/1.1\r\nHost")  # the second head never ends
            answer = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 200 OK")
        finally:
            await server.stop()

    asyncio.run(run())

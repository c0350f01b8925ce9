"""The consumers' lean HTTP/1.1 client against real servers: aiohttp's, and raw sockets scripted per test."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from hermes.broker.embedded import free_port
from hermes.errors import EndpointProtocolError
from hermes.http.client import HttpClient
from hermes.http.streamed import FileRegion, StreamedBody
from tests.support.subscriber import Reply, SubscriberServer

pytestmark = pytest.mark.integration


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """Runs a coroutine on each event loop the consumers may use (uvloop only when installed), and fails if a
    callback of the client raised (the loop would only log it)."""
    factory = None
    if request.param == "uvloop":
        factory = pytest.importorskip("uvloop").new_event_loop

    def runner(coroutine: Coroutine[Any, Any, Any]) -> Any:
        errors: list[dict[str, Any]] = []
        with asyncio.Runner(loop_factory=factory) as loop:
            loop.get_loop().set_exception_handler(lambda _loop, context: errors.append(context))
            result = loop.run(coroutine)
        # the raw test servers' handler tasks are cancelled when the loop closes: that is not the client's
        assert [e for e in errors if not isinstance(e.get("exception"), asyncio.CancelledError)] == []
        return result

    return runner


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return await reader.readexactly(length)


async def _with_server(answer: Answer, scenario: Callable[[str, list[int]], Awaitable[None]]) -> None:
    """Runs ``scenario(url, connections)`` against a raw server answering each request with ``answer``."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            while not reader.at_eof():
                await answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await scenario(f"http://127.0.0.1:{port}/path?q=1", connections)
    finally:
        server.close()
        await server.wait_closed()


def test_posts_body_and_headers_and_reuses_the_connection(subscriber: SubscriberServer, run: Any) -> None:
    subscriber.script = lambda i, _r: Reply(503 if i == 1 else 200, {"Retry-After": "7"})

    async def scenario() -> list[int]:
        client = HttpClient()
        try:
            first = await client.post(subscriber.url + "x?y=1", b'{"a":1}', {"Hermes-Message-Id": "m1"}, 5)
            second = await client.post(subscriber.url + "x?y=1", b"{}", {"Content-Type": "application/json"}, 5)
            assert second.headers["retry-after"] == "7"
            return [first.status, second.status]
        finally:
            await client.close()

    assert run(scenario()) == [200, 503]
    received = subscriber.wait_for(2)
    assert received[0].path == "/x"
    assert received[0].body == b'{"a":1}'
    assert received[0].headers["Hermes-Message-Id"] == "m1"
    assert received[1].headers["Content-Type"] == "application/json"


def test_chunked_and_interim_answers_and_keep_alive(run: Any) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab")
        await writer.drain()
        await asyncio.sleep(0.05)  # the rest in a later packet
        writer.write(b"cd\r\n3;ext=1\r\nefg\r\n0\r\n\r\n")
        await writer.drain()

    async def scenario(url: str, connections: list[int]) -> None:
        client = HttpClient()
        for _ in range(3):
            response = await client.post(url, b"{}", {}, 5)
            assert (response.status, response.body) == (202, b"abcdefg")
        await client.close()
        assert len(connections) == 1

    run(_with_server(answer, scenario))


def test_a_body_delimited_by_the_end_of_the_connection(run: Any) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\n\r\nthe whole body")
        await writer.drain()
        writer.close()

    async def scenario(url: str, connections: list[int]) -> None:
        client = HttpClient()
        assert (await client.post(url, b"{}", {}, 5)).body == b"the whole body"
        assert (await client.post(url, b"{}", {}, 5)).status == 200
        await client.close()
        assert len(connections) == 2

    run(_with_server(answer, scenario))


def test_an_idle_connection_the_endpoint_closed_is_replaced(run: Any) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()  # without saying Connection: close

    async def scenario(url: str, connections: list[int]) -> None:
        client = HttpClient()
        assert (await client.post(url, b"{}", {}, 5)).status == 200
        await asyncio.sleep(0.1)
        assert (await client.post(url, b"{}", {}, 5)).status == 200
        await client.close()
        assert len(connections) == 2

    run(_with_server(answer, scenario))


def test_timeouts_and_failures(run: Any) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await _read_request(reader)
        if body == b"garbage":
            writer.write(b"SMTP ready\r\n\r\n")
        elif body == b"trickle":  # a byte every 0.1 s: never idle for 0.3 s, but longer than 0.5 s in all
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n")
            for _ in range(20):
                await asyncio.sleep(0.1)
                writer.write(b"x")
        else:
            await asyncio.sleep(2)
        await writer.drain()

    async def scenario(url: str, _connections: list[int]) -> None:
        client = HttpClient()
        with pytest.raises(TimeoutError):
            await client.post(url, b"slow", {}, total=0.3)
        with pytest.raises(TimeoutError):
            await client.post(url, b"slow", {}, total=5, idle=0.3)
        with pytest.raises(TimeoutError):
            await client.post(url, b"trickle", {}, total=0.5, idle=0.3)
        with pytest.raises(EndpointProtocolError):
            await client.post(url, b"garbage", {}, total=5)
        with pytest.raises(OSError):
            await client.post(f"http://127.0.0.1:{free_port()}/", b"{}", {}, total=5)
        await client.close()

    run(_with_server(answer, scenario))


def test_each_request_on_a_kept_connection_has_its_own_timeouts(run: Any) -> None:
    """A connection keeps the timer of its last request for the next (it is armed anew only when the next one's
    deadline comes sooner): a shorter timeout still ends its request in time, a longer one is not cut short."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await _read_request(reader) == b"slow":
            await asyncio.sleep(0.6)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    async def scenario(url: str, connections: list[int]) -> None:
        client = HttpClient()
        assert (await client.post(url, b"fast", {}, total=30)).status == 200  # its timer, 30 s away, stays
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.post(url, b"slow", {}, total=0.3)
        assert time.monotonic() - started < 5
        assert (await client.post(url, b"fast", {}, total=0.2)).status == 200  # a new connection; a 0.2 s timer
        assert (await client.post(url, b"slow", {}, total=5, idle=3)).status == 200  # outlives the 0.2 s one
        assert len(connections) == 2
        await client.close()

    run(_with_server(answer, scenario))


def test_a_body_streamed_from_a_file_arrives_whole_and_an_early_answer_stops_it(run: Any) -> None:
    stored = os.urandom(3 * 1024 * 1024 + 7)  # several chunks, more than the transport's buffer takes at once

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if b"early" in head.split(b"\r\n")[0]:  # refused before its body is read: the rest never comes
            writer.write(b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.5)
            raise ConnectionResetError  # ends this connection's handler
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"Content-Length"))
        body = await reader.readexactly(length)
        digest = hashlib.sha256(body).hexdigest().encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(digest), digest))
        await writer.drain()

    async def scenario(url: str, connections: list[int]) -> None:
        with tempfile.TemporaryFile() as file:
            file.write(b"junk" + stored + b"more junk")
            file.flush()
            region = FileRegion(file, 4, len(stored))
            body = StreamedBody((b"[", region, b",", region, b"]"))
            client = HttpClient()
            for _ in range(2):
                response = await client.post(url, body, {}, 10)
                assert response.body == hashlib.sha256(b"[" + stored + b"," + stored + b"]").hexdigest().encode()
            assert len(connections) == 1  # kept alive after a streamed body
            response = await client.post(url.replace("/path", "/early"), body, {}, 10)
            assert response.status == 413
            assert (await client.post(url, body, {}, 10)).status == 200
            assert len(connections) == 2  # the cut-short connection was not reused
            await client.close()

    run(_with_server(answer, scenario))


def test_a_post_given_up_during_the_name_look_up_leaves_no_unread_failure(
    run: Callable[[Coroutine[Any, Any, Any]], Any],
) -> None:
    """uvloop's connect, cancelled while it looks a name up, left the look-up's failure unread: "Future exception
    was never retrieved", once per delivery to a name that does not resolve (the run fixture fails on it)."""
    hosts = [f"no-such-host-{n}.invalid" for n in range(4)]

    async def scenario() -> None:
        client = HttpClient()
        for total in (0.0001, 0.001, 0.01):
            for host in hosts:
                with pytest.raises((TimeoutError, OSError)):
                    await client.post(f"http://{host}/", b"x", {}, total=total)
        loop = asyncio.get_running_loop()
        for host in hosts:  # behind the abandoned ones: once these failed, those have too
            with pytest.raises(OSError):
                await loop.getaddrinfo(host, 80)
        await asyncio.sleep(0.1)
        gc.collect()  # an unread failure is reported when its future is collected
        await client.close()

    run(scenario())

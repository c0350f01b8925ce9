"""The lean server's large bodies: written to a file as they arrive above the threshold (removed once answered, or
when the client goes away), held in memory below it; streamed answers arrive whole, and the connection goes on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx

from hermes.http.lean import LeanServer, Request

SPOOL_ABOVE = 1000


def _serve(spool: Path, handler: Callable[[Request], None], client: Callable[[str], Awaitable[None]]) -> None:
    async def run() -> None:
        server = LeanServer(handler, "127.0.0.1", 0, "test server", spool_dir=spool, spool_above=SPOOL_ABOVE)
        port = await server.start()
        try:
            await client(f"http://127.0.0.1:{port}")
        finally:
            await server.stop(grace=1.0)

    asyncio.run(run())


def test_bodies_over_the_threshold_are_spooled_and_removed_once_answered(tmp_path: Path) -> None:
    seen: list[tuple[bytes, bytes | None, bool]] = []

    def handler(request: Request) -> None:
        spooled = request.spooled
        seen.append((request.body, spooled.read() if spooled else None, bool(spooled and spooled.path.exists())))
        request.respond(200, body=str(spooled.size if spooled else len(request.body)).encode())

    async def client(url: str) -> None:
        async with httpx.AsyncClient() as http:
            small = await http.post(url + "/x", content=b"s" * SPOOL_ABOVE)
            large = await http.post(url + "/x", content=b"L" * 5000)
        assert (small.text, large.text) == ("1000", "5000")

    _serve(tmp_path, handler, client)
    assert seen == [(b"s" * SPOOL_ABOVE, None, False), (b"", b"L" * 5000, True)]
    assert list(tmp_path.iterdir()) == []


def test_a_client_gone_in_the_middle_of_a_large_body_leaves_no_file(tmp_path: Path) -> None:
    async def client(url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n" + b"a" * 3000)
        await writer.drain()
        for _ in range(200):  # the partial file appears once the headers are read
            if list(tmp_path.iterdir()):
                break
            await asyncio.sleep(0.01)
        assert len(list(tmp_path.iterdir())) == 1
        writer.close()
        for _ in range(500):
            if not list(tmp_path.iterdir()):
                break
            await asyncio.sleep(0.01)

    _serve(tmp_path, lambda request: request.respond(200), client)
    assert list(tmp_path.iterdir()) == []


def test_a_streamed_answer_arrives_whole_and_the_connection_serves_on(tmp_path: Path) -> None:
    chunk = b"c" * 700_000  # several chunks beyond the stream buffer: the server waits for the client

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield chunk

    def handler(request: Request) -> None:
        if request.path == "/stream":
            asyncio.get_running_loop().create_task(request.stream(200, (), 5 * len(chunk), chunks(), "text/plain"))
        else:
            request.respond(200, body=b"next")

    async def client(url: str) -> None:
        async with httpx.AsyncClient() as http:
            streamed = await http.get(url + "/stream")
            following = await http.get(url + "/after")
        assert streamed.content == chunk * 5
        assert streamed.headers["content-length"] == str(5 * len(chunk))
        assert following.text == "next"

    _serve(tmp_path, handler, client)


def test_pipelined_requests_small_and_spooled_are_answered_in_order(tmp_path: Path) -> None:
    def handler(request: Request) -> None:
        size = request.spooled.size if request.spooled else len(request.body)
        request.respond(200, body=f"{request.path}:{size}".encode())

    async def client(url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
            b"POST /b HTTP/1.1\r\nHost: h\r\nContent-Length: 2000\r\n\r\n"
            + b"b" * 2000
            + b"GET /c HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
        )
        answers = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        bodies = [part.split(b"\r\n\r\n", 1)[1] for part in answers.split(b"HTTP/1.1 200 OK")[1:]]
        assert bodies == [b"/a:3", b"/b:2000", b"/c:0"]

    _serve(tmp_path, handler, client)
    assert list(tmp_path.iterdir()) == []


def test_a_chunked_body_goes_to_a_file_once_it_grows_past_the_threshold(tmp_path: Path) -> None:
    seen: list[tuple[bytes, bytes | None]] = []

    def handler(request: Request) -> None:
        seen.append((request.body, request.spooled.read() if request.spooled else None))
        request.respond(200)

    async def parts(count: int) -> AsyncIterator[bytes]:
        for n in range(count):
            yield b"%d" % n * 300

    async def client(url: str) -> None:
        async with httpx.AsyncClient() as http:  # an async iterator of parts: sent chunked, no Content-Length
            assert (await http.post(url + "/x", content=parts(3))).status_code == 200
            assert (await http.post(url + "/x", content=parts(8))).status_code == 200

    _serve(tmp_path, handler, client)
    small, large = b"".join(b"%d" % n * 300 for n in range(3)), b"".join(b"%d" % n * 300 for n in range(8))
    assert seen == [(small, None), (b"", large)]
    assert list(tmp_path.iterdir()) == []

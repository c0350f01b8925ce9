"""The lean server going away: draining, every answer closes its connection (a client does not send on a kept-alive
connection as the server closes it); stopping, it refuses new connections and answers a request whose body was
still arriving."""

from __future__ import annotations

import asyncio

import pytest

from hermes.http.lean import LeanServer, Request

pytestmark = pytest.mark.unit


def _echo(request: Request) -> None:
    request.respond(200, body=request.body)


async def _read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    sizes = [line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    return head + await asyncio.wait_for(reader.readexactly(int(sizes[0])), 5)


def test_a_draining_server_closes_each_connection_after_its_answer() -> None:
    async def run() -> None:
        server = LeanServer(_echo, "127.0.0.1", 0, "test server")
        port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"
            writer.write(request)
            assert b"Connection: close" not in await _read_answer(reader)  # kept alive
            server.drain()
            writer.write(request)
            answer = await _read_answer(reader)
            assert answer.endswith(b"hi") and b"Connection: close\r\n" in answer
            assert await asyncio.wait_for(reader.read(), 5) == b""  # and closed
            writer.close()
        finally:
            await server.stop(grace=1.0)

    asyncio.run(run())


def test_stopping_answers_a_request_still_arriving_and_refuses_new_connections() -> None:
    async def run() -> None:
        server = LeanServer(_echo, "127.0.0.1", 0, "test server")
        port = await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nab")
        await writer.drain()
        await asyncio.sleep(0.1)  # the head is read
        stopping = asyncio.create_task(server.stop(grace=5.0))
        await asyncio.sleep(0.1)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"cd")
        answer = await _read_answer(reader)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"abcd")
        await stopping
        writer.close()

    asyncio.run(run())

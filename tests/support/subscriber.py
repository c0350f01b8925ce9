"""A real HTTP subscriber endpoint in a background thread, recording requests and answering as scripted."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic()

    @property
    def message_id(self) -> str | None:
        return self.headers.get("Hermes-Message-Id")


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    body: bytes = b""


Script = Callable[[int, "Received"], Reply]


def always(status: int = 200, **headers: str) -> Script:
    return lambda _i, _r: Reply(status, dict(headers))


class SubscriberServer:
    """``script(n, request)`` decides the reply to the n-th request (0-based)."""

    def __init__(self, script: Script | None = None, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: the server's context, to listen for HTTPS."""
        self.script: Script = script or always(200)
        self.tls = tls
        self.received: list[Received] = []
        self._cond = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/"

    def start(self) -> SubscriberServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _start(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _handle(self, request: web.Request) -> web.Response:
        received = Received(request.path, dict(request.headers), await request.read(), time.monotonic())
        with self._cond:
            index = len(self.received)
            self.received.append(received)
            self._cond.notify_all()
        reply = self.script(index, received)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        return web.Response(status=reply.status, headers=reply.headers, body=reply.body)

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        """Blocks until at least ``count`` requests arrived; fails the test otherwise."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.received) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"expected {count} requests, got {len(self.received)} in {timeout} s")
                self._cond.wait(remaining)
            return list(self.received)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            if self.tls is not None:  # TLS connections close in callbacks after the cleanup: let them run
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0.05), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

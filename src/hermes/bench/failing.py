"""A subscriber endpoint that fails every request, in a child process of its own, so that its work does not share
an interpreter (and its lock) with what is measured. ``GET /received`` answers how many requests it got.

Run as ``python -m hermes.bench.failing STATUS DELAY [EVERY]``: it prints its port, then answers every request
(or every EVERY-th, the others 200 at once) with STATUS after DELAY seconds.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import aiohttp
from aiohttp import web

from hermes.children import spawn_tied


async def _serve(status: int, delay: float, every: int) -> None:
    received = 0

    async def fail(request: web.Request) -> web.Response:
        nonlocal received
        received += 1
        await request.read()
        if received % every:
            return web.Response(status=200)
        await asyncio.sleep(delay)
        return web.Response(status=status)

    async def count(_: web.Request) -> web.Response:
        return web.json_response(received)

    app = web.Application()
    app.router.add_get("/received", count)
    app.router.add_route("*", "/{tail:.*}", fail)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


class FailingEndpoint:
    def __init__(self, status: int, delay: float = 0.0, every: int = 1) -> None:
        """``every``: of how many requests one fails (1: all)."""
        self._process = spawn_tied(
            [sys.executable, "-m", "hermes.bench.failing", str(status), str(delay), str(every)], stdout=subprocess.PIPE
        )
        assert self._process.stdout is not None
        self.port = int(self._process.stdout.readline())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def received(self, session: aiohttp.ClientSession) -> int:
        async with session.get(f"{self.url}received") as response:
            return int(await response.json())

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(10)
        assert self._process.stdout is not None
        self._process.stdout.close()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1))

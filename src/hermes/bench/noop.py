"""A no-op endpoint on the same HTTP stack (and event loop) as the frontend: the ceiling a publish can reach."""

from __future__ import annotations

import asyncio
import os
import sys

from aiohttp import web

from hermes.cli import loop_factory


async def _created(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(status=201, headers={"Hermes-Message-Id": "noop"})


def main() -> None:
    app = web.Application()
    app.router.add_post("/topics/{topic}", _created)
    factory = loop_factory(os.environ.get("HERMES_EVENT_LOOP", "auto"))
    loop = factory() if factory is not None else asyncio.new_event_loop()
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None, loop=loop, backlog=1024)


if __name__ == "__main__":
    main()

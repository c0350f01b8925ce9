"""A no-op endpoint on the same HTTP stack as the frontend: the ceiling a publish can reach."""

from __future__ import annotations

import sys

from aiohttp import web


async def _created(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(status=201, headers={"Hermes-Message-Id": "noop"})


def main() -> None:
    app = web.Application()
    app.router.add_post("/topics/{topic}", _created)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()

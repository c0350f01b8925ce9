"""No-op publish endpoints on the fastest Python HTTP servers: the ceiling a publish is compared with.

``python -m hermes.bench.noop uvicorn PORT``: a raw ASGI app on uvicorn with httptools and uvloop;
``python -m hermes.bench.noop granian PORT``: a raw RSGI app on granian (one worker, Rust I/O). Each reads the
body and answers 201 with a ``Hermes-Message-Id``, as a publish does, and nothing else.
"""

from __future__ import annotations

import sys
from typing import Any

SERVERS = ("uvicorn", "granian")


async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 201, "headers": [(b"hermes-message-id", b"noop")]})
    await send({"type": "http.response.body", "body": b""})


async def rsgi(scope: Any, protocol: Any) -> None:
    await protocol()
    protocol.response_empty(201, [("hermes-message-id", "noop")])


def main() -> None:
    server, port = sys.argv[1], int(sys.argv[2])
    if server == "uvicorn":
        import uvicorn

        uvicorn.run(
            asgi,
            host="127.0.0.1",
            port=port,
            http="httptools",
            loop="uvloop",
            lifespan="off",
            access_log=False,
            log_level="warning",
            backlog=1024,
        )
    else:
        from granian import Granian
        from granian.constants import Interfaces

        Granian(
            "hermes.bench.noop:rsgi",
            "127.0.0.1",
            port,
            interface=Interfaces.RSGI,
            workers=1,
            log_enabled=False,
            backlog=1024,
        ).serve()


if __name__ == "__main__":
    main()

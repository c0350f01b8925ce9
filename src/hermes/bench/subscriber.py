"""The benchmark's recording subscriber, a process of its own (``python -m hermes.bench.subscriber``): the lean
HTTP server (httptools on uvloop) answering ``POST /s/<name>`` with 200, stamping each request's arrival with
``time.monotonic()`` (system-wide on Linux, so comparable with the benchmark's send times) when its body is
whole.

In the benchmark's own process an aiohttp server cost 80-150 µs per request before its stamp, on the event loop
and GIL that also run the publisher: the 100 deliveries of one message to 100 subscriptions were stamped over
10-15 ms whatever Hermes did (docs/benchmarks.md, "A hundred subscriptions: the subscriber was the bound").

Protocol on its pipes: the first line out is the port; then one line per arrival, ``name<TAB>message id<TAB>
time``, written once per turn of the event loop. A line in, ``name<TAB>seconds``, delays that subscription's
answers from then on (0: none), and is acknowledged with a line ``!``. The process ends when its input closes.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time

from hermes.http.edge import EdgeLimits
from hermes.http.lean import LeanServer, Request

_PREFIX = "/s/"
# A burst to 100 subscriptions of inflightSize 100 opens up to 6,000 connections at once: beyond the publishing
# port's cap (4,096) the server closed idle ones and refused others, and the refused deliveries waited for retries
# (the 100-subscription burst at 2,172 deliveries/s in the run of 16:37). Under this machine's 20,000 descriptors.
_LIMITS = EdgeLimits(max_connections=16_384)


class _Recorder:
    def __init__(self, out: asyncio.WriteTransport) -> None:
        self.delays: dict[str, float] = {}
        self.pending: list[str] = []
        self.loop = asyncio.get_running_loop()
        self.out = out

    def handle(self, request: Request) -> None:
        at = time.monotonic()
        if not request.path.startswith(_PREFIX):
            request.respond(404)
            return
        name = request.path[len(_PREFIX) :]
        if not self.pending:
            self.loop.call_soon(self.flush)
        self.pending.append(f"{name}\t{request.headers.get('hermes-message-id', '')}\t{at!r}\n")
        delay = self.delays.get(name)
        if delay:
            self.loop.call_later(delay, request.respond, 200)
        else:
            request.respond(200)

    def flush(self) -> None:
        lines, self.pending = self.pending, []
        self.write("".join(lines))

    def write(self, text: str) -> None:
        self.out.write(text.encode())


async def serve() -> None:
    loop = asyncio.get_running_loop()
    out, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    recorder = _Recorder(out)
    # bodies up to the large-message scenarios' 100 MB, held in memory as aiohttp's sink did
    server = LeanServer(recorder.handle, "127.0.0.1", 0, "benchmark subscriber", max_body=1024**3, limits=_LIMITS)
    recorder.write(f"{await server.start()}\n")
    gc.freeze()  # what start-up made is never collected: collections walk only the requests' garbage
    try:
        while line := await commands.readline():
            name, _, seconds = line.decode().rstrip("\n").partition("\t")
            recorder.delays[name] = float(seconds)
            recorder.write("!\n")
    finally:
        await server.stop(grace=0.5)
        out.close()


def main() -> None:
    try:
        import uvloop
    except ImportError:  # the fast extra is not installed: asyncio's loop, a little more CPU per request
        asyncio.run(serve())
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve())


if __name__ == "__main__":
    main()

"""Load generators (publishers) on the benchmark's event loop, and the recording subscriber endpoint (a process of
its own, ``hermes.bench.subscriber``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import time
from asyncio.subprocess import PIPE
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from hermes.bench.stats import achieved_rate, latency_ms, schedule
from hermes.errors import EndpointProtocolError
from hermes.http.client import HttpClient

JSON_HEADERS = {"Content-Type": "application/json"}


def json_body(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes (at least 16)."""
    filler = max(0, size - len(b'{"payload":""}'))
    return b'{"payload":"' + b"x" * filler + b'"}'


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection in this process while it measures. Its full collections walk the tens of
    thousands of tasks and records a run holds and stopped the generator and the sink for 20-130 ms, once or
    twice a run: time charged to the system under test (at 5,000 msg/s, publish p99 7-41 ms with them, about
    5 ms without). The garbage is collected when the measurement is over."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            gc.collect()


@dataclass
class Sent:
    """The outcome of a batch of publishes: accepted message ids with their scheduled send times."""

    accepted: dict[str, float] = field(default_factory=dict)  # Hermes-Message-Id -> scheduled (monotonic)
    latencies: list[float] = field(default_factory=list)  # seconds, from the scheduled time
    completed_at: list[float] = field(default_factory=list)
    codes: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    # The consumers process's CPU seconds when the deliveries began to be due, where that is after the publishes
    # (a backlog drained once its subscription is activated); None: counted from before the first publish.
    consumers_cpu_from: float | None = None

    def record(self, scheduled: float, status: int, message_id: str | None) -> None:
        now = time.monotonic()
        self.latencies.append(now - scheduled)
        self.completed_at.append(now)
        self.codes[status] = self.codes.get(status, 0) + 1
        if status in (201, 202) and message_id:
            self.accepted[message_id] = scheduled


async def _post(client: HttpClient, url: str, body: bytes, scheduled: float, sent: Sent) -> None:
    try:
        response = await client.post(url, body, JSON_HEADERS, 60)
        sent.record(scheduled, response.status, response.headers.get("hermes-message-id"))
    except (OSError, TimeoutError, EndpointProtocolError):
        sent.errors += 1


async def open_loop(url: str, body: bytes, rate: float, seconds: float, sent: Sent, connections: int = 64) -> None:
    """Publishes at a fixed ``rate`` whatever the answers take, recording each accepted message id in ``sent``
    with its scheduled time (for the delivery scenarios' reconciliation; publish latency alone comes from
    hermes-openloop, in C, at a third of this one's CPU per request). At most ``connections`` requests are in
    flight (as wrk2 keeps a fixed set of connections): the rest wait in the generator, and that wait counts in
    their latency. Without the bound a stall would make the generator open hundreds of connections and measure
    its own connection storm."""
    times = schedule(rate, seconds)
    slots = asyncio.Semaphore(connections)
    with gc_paused():
        async with _client() as client:

            async def send(scheduled: float) -> None:
                async with slots:
                    await _post(client, url, body, scheduled, sent)

            start = time.monotonic() + 0.05
            # only the unfinished tasks and the failed ones are kept: a run of minutes keeps no finished task
            tasks: set[asyncio.Task[None]] = set()
            failed: list[asyncio.Task[None]] = []

            def finished(task: asyncio.Task[None]) -> None:
                tasks.discard(task)
                if not task.cancelled() and task.exception() is not None:
                    failed.append(task)

            i = 0
            while i < len(times):
                now = time.monotonic()
                while i < len(times) and start + times[i] <= now:  # everything due, even if late
                    task = asyncio.create_task(send(start + times[i]))
                    tasks.add(task)
                    task.add_done_callback(finished)
                    i += 1
                if i < len(times):
                    await asyncio.sleep(max(0.0, start + times[i] - time.monotonic()))
            await asyncio.gather(*tasks, *failed)  # raises the first failure


async def closed_loop(url: str, body: bytes, seconds: float, concurrency: int) -> dict[str, Any]:
    """``concurrency`` publishers each sending the next message as soon as the previous one is answered: the
    maximum rate. Its latency is not coordinated-omission safe and is reported only as a secondary figure."""
    sent = Sent()
    stop = time.monotonic() + seconds
    began = time.monotonic()
    with gc_paused():
        async with _client() as s:

            async def worker() -> None:
                while time.monotonic() < stop:
                    await _post(s, url, body, time.monotonic(), sent)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
    return _result(sent, [began])


async def publish_count(url: str, body: bytes, count: int, concurrency: int) -> Sent:
    """Publishes exactly ``count`` messages as fast as ``concurrency`` requests in flight allow."""
    sent = Sent()
    remaining = iter(range(count))
    with gc_paused():
        async with _client() as s:

            async def worker() -> None:
                for _ in remaining:
                    await _post(s, url, body, time.monotonic(), sent)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sent


@contextlib.asynccontextmanager
async def _client() -> AsyncIterator[HttpClient]:
    """The load generator's client: the consumers' lean one, so that generating load takes little of the CPU
    the system under test needs (aiohttp's client costs about four times as much per request)."""
    client = HttpClient()
    try:
        yield client
    finally:
        await client.close()


def _result(sent: Sent, scheduled: list[float]) -> dict[str, Any]:
    return {
        "requests": len(sent.latencies),
        "throughput": round(achieved_rate(scheduled, sent.completed_at), 1),
        "latency_ms": latency_ms(sent.latencies),
        "codes": {str(k): v for k, v in sorted(sent.codes.items())},
        "errors": sent.errors,
    }


class Sink:
    """A subscriber endpoint for many subscriptions (``/s/<name>``), recording each arrival's message id and
    time; a subscription may be made slow (every answer delayed). The server is a process of its own
    (``hermes.bench.subscriber``), which stamps the arrivals and streams them here: in this process, beside the
    publisher, its request handling delayed the stamps of a fan-out's deliveries by milliseconds."""

    def __init__(self) -> None:
        self.arrivals: dict[str, list[tuple[str, float]]] = {}
        self.port = 0
        self._process: asyncio.subprocess.Process | None = None
        self._reading: asyncio.Task[None] | None = None
        self._acks: asyncio.Queue[None] = asyncio.Queue()
        self._waiters: list[tuple[str, int, asyncio.Event]] = []

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/s/{name}"

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hermes.bench.subscriber", stdin=PIPE, stdout=PIPE
        )
        assert self._process.stdout is not None
        line = await asyncio.wait_for(self._process.stdout.readline(), 30)
        if not line:
            raise RuntimeError(f"the benchmark's subscriber exited with {await self._process.wait()}")
        self.port = int(line)
        self._reading = asyncio.create_task(self._read(self._process.stdout))

    async def stop(self) -> None:
        if self._process is None:
            return
        assert self._process.stdin is not None
        self._process.stdin.close()  # its end
        try:
            await asyncio.wait_for(self._process.wait(), 10)
        except TimeoutError:
            self._process.kill()
            await self._process.wait()
        if self._reading is not None:
            await self._reading

    def reset(self) -> None:
        self.arrivals.clear()

    async def set_delay(self, name: str, seconds: float) -> None:
        """Every answer to ``name`` from now on after ``seconds`` (0: at once)."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(f"{name}\t{seconds!r}\n".encode())
        await self._process.stdin.drain()
        await asyncio.wait_for(self._acks.get(), 10)

    async def _read(self, lines: asyncio.StreamReader) -> None:
        rest = b""
        while chunk := await lines.read(1 << 16):
            *whole, rest = (rest + chunk).split(b"\n")
            touched = set()
            for line in whole:
                if line == b"!":
                    self._acks.put_nowait(None)
                    continue
                name, message_id, at = line.decode().split("\t")
                self.arrivals.setdefault(name, []).append((message_id, float(at)))
                touched.add(name)
            for waiter in self._waiters:
                if waiter[0] in touched and len(self.arrivals[waiter[0]]) >= waiter[1]:
                    waiter[2].set()

    async def wait_for(self, name: str, count: int, within: float) -> bool:
        """True when ``name`` has at least ``count`` arrivals within ``within`` seconds."""
        if len(self.arrivals.get(name, [])) >= count:
            return True
        event = asyncio.Event()
        waiter = (name, count, event)
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(event.wait(), within)
            return True
        except TimeoutError:
            return False
        finally:
            self._waiters.remove(waiter)

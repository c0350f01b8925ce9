"""``hermes bench``: publish and delivery throughput of one ``hermes run`` process beside their ceilings.

- publish: closed-loop 1 KB JSON publishes with ``concurrency`` requests in flight for ``seconds``, against
  the frontend and against a no-op endpoint on the same HTTP stack (aiohttp) in its own process.
- delivery: ``messages`` published to a topic with one SERIAL subscription (inflightSize 100, rate 100,000)
  to a fast local subscriber; throughput from first to last arrival and publish-to-delivery latency; beside a
  raw POST loop (same concurrency) from one process to the same subscriber.

The load generator and the subscriber share this process; the system under test runs in its own.
Closed-loop latency is not coordinated-omission safe: it is reported as a secondary figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from hermes.broker.embedded import EmbeddedBroker, free_port

BODY = json.dumps({"payload": "x" * 990}).encode()  # ~1 KB


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


@contextlib.contextmanager
def _process(argv: list[str], health: str) -> Iterator[None]:
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with contextlib.closing(__import__("socket").create_connection(("127.0.0.1", int(health)), 0.2)):
                    break
            except OSError:
                time.sleep(0.1)
        time.sleep(0.5)
        yield
    finally:
        process.terminate()
        process.wait(30)


async def _closed_loop(url: str, seconds: float, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []
    codes: dict[int, int] = {}
    stop = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def worker() -> None:
            while time.monotonic() < stop:
                started = time.perf_counter()
                async with session.post(url, data=BODY, headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    codes[r.status] = codes.get(r.status, 0) + 1
                latencies.append(time.perf_counter() - started)

        began = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - began
    return {
        "throughput": round(len(latencies) / elapsed, 1),
        "p50_ms": round(_percentile(latencies, 0.5) * 1e3, 2),
        "p99_ms": round(_percentile(latencies, 0.99) * 1e3, 2),
        "codes": codes,
    }


class _Subscriber:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.all_arrived = asyncio.Event()
        self.arrivals: dict[str, float] = {}
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.arrivals[request.headers.get("Hermes-Message-Id", str(len(self.arrivals)))] = time.monotonic()
        if len(self.arrivals) >= self.expected:
            self.all_arrived.set()
        return web.Response()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def _delivery(management: str, frontend: str, messages: int, concurrency: int) -> dict[str, Any]:
    subscriber = _Subscriber(messages)
    await subscriber.start()
    try:
        async with aiohttp.ClientSession() as api:
            group, topic = f"bench{os.getpid()}", f"bench{os.getpid()}.delivery"
            await (await api.post(f"{management}/groups", json={"groupName": group})).read()
            await (await api.post(f"{management}/topics", json={"name": topic, "owner": {"id": "bench"}})).read()
            sub = {
                "name": "fast",
                "endpoint": f"http://127.0.0.1:{subscriber.port}/",
                "subscriptionPolicy": {"inflightSize": 100, "rate": 100_000},
            }
            await (await api.post(f"{management}/topics/{topic}/subscriptions", json=sub)).read()
            await asyncio.sleep(4)  # the consumer joins its group
            sent: dict[str, float] = {}
            queue: asyncio.Queue[int] = asyncio.Queue()
            for i in range(messages):
                queue.put_nowait(i)

            async def publisher() -> None:
                while not queue.empty():
                    queue.get_nowait()
                    at = time.monotonic()
                    async with api.post(
                        f"{frontend}/topics/{topic}", data=BODY, headers={"Content-Type": "application/json"}
                    ) as r:
                        sent[r.headers["Hermes-Message-Id"]] = at

            await asyncio.gather(*(publisher() for _ in range(concurrency)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(subscriber.all_arrived.wait(), 120)
        missing = set(sent) - set(subscriber.arrivals)
        arrivals = sorted(subscriber.arrivals.values())
        latencies = [subscriber.arrivals[m] - t for m, t in sent.items() if m in subscriber.arrivals]
        result: dict[str, Any] = {
            "messages": messages,
            "missing": len(missing),
            "throughput": round(messages / max(arrivals[-1] - arrivals[0], 1e-6), 1) if arrivals else 0.0,
            "p50_ms": round(_percentile(latencies, 0.5) * 1e3, 1),
            "p99_ms": round(_percentile(latencies, 0.99) * 1e3, 1),
        }
        # the ceiling: a raw POST loop from one process to the same subscriber
        subscriber.arrivals.clear()
        subscriber.expected = 10**9
        raw = await _closed_loop(f"http://127.0.0.1:{subscriber.port}/", 5.0, 100)
        result["raw_post_loop"] = raw["throughput"]
        return result
    finally:
        await subscriber.stop()


def run(seconds: float = 10.0, messages: int = 5000, concurrency: int = 32, repetitions: int = 3) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    broker = EmbeddedBroker(log_dir=data_dir / "tansu")
    broker.start()
    frontend_port, management_port, noop_port = free_port(), free_port(), free_port()
    hermes = [
        sys.executable,
        "-m",
        "hermes",
        "run",
        "--data-dir",
        str(data_dir),
        "--kafka-bootstrap-servers",
        broker.bootstrap_servers,
        "--frontend-port",
        str(frontend_port),
        "--management-port",
        str(management_port),
        "--log-level",
        "WARNING",
        "--no-pipeline",  # Spark would compete with publishing and delivery for the CPUs
    ]
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d"),
        }
    }
    try:
        with _process([sys.executable, "-m", "hermes.bench.noop", str(noop_port)], str(noop_port)):
            noop = [
                asyncio.run(_closed_loop(f"http://127.0.0.1:{noop_port}/topics/t", seconds, concurrency))
                for _ in range(repetitions)
            ]
        with _process(hermes, str(management_port)):
            frontend = f"http://127.0.0.1:{frontend_port}"
            management = f"http://127.0.0.1:{management_port}"
            asyncio.run(_setup_publish_topic(management))
            publish = [
                asyncio.run(_closed_loop(f"{frontend}/topics/benchp.publish", seconds, concurrency))
                for _ in range(repetitions)
            ]
            delivery = asyncio.run(_delivery(management, frontend, messages, concurrency))
    finally:
        broker.stop()
    results["publish"] = _summary(publish)
    results["noop"] = _summary(noop)
    results["publish_vs_noop"] = round(
        results["publish"]["throughput"]["median"] / results["noop"]["throughput"]["median"], 3
    )
    results["delivery"] = delivery
    results["delivery_vs_raw_post"] = round(delivery["throughput"] / max(delivery["raw_post_loop"], 1e-6), 3)
    return results


async def _setup_publish_topic(management: str) -> None:
    async with aiohttp.ClientSession() as api:
        await (await api.post(f"{management}/groups", json={"groupName": "benchp"})).read()
        await (await api.post(f"{management}/topics", json={"name": "benchp.publish", "owner": {"id": "b"}})).read()


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("throughput", "p50_ms", "p99_ms"):
        values = [float(r[key]) for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    out["codes"] = runs[-1]["codes"]
    return out

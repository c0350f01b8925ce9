"""BATCH delivery throughput: how fast one BATCH subscription drains a backlog to a fast local subscriber.

The subscription is created and warmed up, then suspended; ``messages`` numbered 1 KB JSON messages are
published; on activation its consumer drains them in batches of ``batch_size``. Throughput counts messages from
the first batch's arrival to the last one's, so the consumer group join after activation is left out. Every
message is reconciled: by id (``Hermes-Message-Ids``) and by content (each element's number), so a lost,
duplicated or mangled message shows. Beside it, the ceiling: one POST loop (one batch in flight, as the consumer
does) of the same batches from this process to the same subscriber.

``batch_throughput(management_url, frontend_url)`` runs against a running system (the benchmark suite's);
``python -m hermes.bench.batch`` starts the embedded broker and one ``hermes run`` for it and prints JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from hermes.bench.interrupt import alone
from hermes.bench.system import cpu_seconds
from hermes.broker.embedded import EmbeddedBroker, free_port
from hermes.children import spawn_tied

_PAD = "x" * 1024


def _body(number: int) -> bytes:
    return orjson.dumps({"n": number, "payload": _PAD[: 1024 - 19 - len(str(number))]})  # 1 KB


class _BatchSink:
    """Records every batch: arrival time, message ids and the numbers in its body."""

    def __init__(self) -> None:
        self.port = free_port()
        self.batches: list[tuple[float, list[str], list[int]]] = []
        self.malformed = 0
        self.changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    async def _handle(self, request: web.Request) -> web.Response:
        at = time.monotonic()
        body = await request.read()
        ids = [i for i in request.headers.get("Hermes-Message-Ids", "").split(",") if i]
        try:
            numbers = [int(element["n"]) for element in orjson.loads(body)]
        except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
            numbers = []
        if len(numbers) != len(ids):
            self.malformed += 1
        self.batches.append((at, ids, numbers))
        self.changed.set()
        return web.Response()

    def message_count(self) -> int:
        return sum(len(ids) for _, ids, _ in self.batches)

    async def wait_for(self, count: int, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while self.message_count() < count:
                    self.changed.clear()
                    await self.changed.wait()
        return self.message_count() >= count


async def _call(api: aiohttp.ClientSession, method: str, url: str, body: Any) -> None:
    async with api.request(method, url, json=body) as response:
        text = await response.text()
        if response.status >= 300:
            raise RuntimeError(f"{method} {url} answered {response.status}: {text}")


async def _publish(api: aiohttp.ClientSession, url: str, numbers: range, concurrency: int) -> dict[str, int]:
    """Publishes each numbered message; returns the accepted ones as message id -> number."""
    accepted: dict[str, int] = {}
    pending = iter(numbers)

    async def worker() -> None:
        for number in pending:
            headers = {"Content-Type": "application/json"}
            async with api.post(url, data=_body(number), headers=headers) as response:
                await response.read()
                if response.status in (201, 202):
                    accepted[response.headers["Hermes-Message-Id"]] = number

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return accepted


async def _ceiling(url: str, batch: bytes, ids: str, seconds: float) -> float:
    """Messages/s of one POST loop sending ``batch`` (one in flight) for ``seconds``."""
    count = 0
    headers = {"Content-Type": "application/json", "Hermes-Message-Ids": ids}
    async with aiohttp.ClientSession() as session:
        began = time.monotonic()
        while time.monotonic() - began < seconds:
            async with session.post(url, data=batch, headers=headers) as response:
                await response.read()
            count += 1
        elapsed = time.monotonic() - began
    return round(count * len(ids.split(",")) / elapsed, 1)


async def batch_throughput(
    management: str,
    frontend: str,
    messages: int = 20_000,
    batch_size: int = 100,
    concurrency: int = 32,
    drain_timeout: float = 300.0,
    ceiling_seconds: float = 5.0,
    consumer_pid: int | None = None,
) -> dict[str, Any]:
    """Drains ``messages`` 1 KB messages through one BATCH subscription (``batch_size`` per batch) and
    reconciles every one; see the module docstring. With ``consumer_pid`` (the process delivering), also the CPU
    time it spent per delivered message from the activation to the drain's end."""
    sink = _BatchSink()
    await sink.start()
    try:
        async with aiohttp.ClientSession() as api:
            group, topic, name = f"benchb{os.getpid()}", f"benchb{os.getpid()}.batch{batch_size}", "drain"
            subscription = f"{management}/topics/{topic}/subscriptions/{name}"
            with contextlib.suppress(RuntimeError):  # a second run reuses the group
                await _call(api, "POST", f"{management}/groups", {"groupName": group})
            await _call(api, "POST", f"{management}/topics", {"name": topic, "owner": {"id": "bench"}})
            policy = {"batchSize": batch_size, "batchTime": 200, "batchVolume": 64 * 1024 * 1024}
            body = {"name": name, "endpoint": sink.url, "owner": {"id": "bench"}, "deliveryType": "BATCH"}
            body["subscriptionPolicy"] = policy
            await _call(api, "POST", f"{management}/topics/{topic}/subscriptions", body)
            publish_url = f"{frontend}/topics/{topic}"
            warm = await _publish(api, publish_url, range(-1, 0), 1)
            if not await sink.wait_for(len(warm), 60):
                return {"error": "the subscription never started receiving", "void": True}
            await _call(api, "PUT", f"{subscription}/state", "SUSPENDED")
            await asyncio.sleep(2.0)  # the consumer stops and commits before the backlog is published
            sink.batches.clear()
            began = time.monotonic()
            accepted = await _publish(api, publish_url, range(messages), concurrency)
            publish_seconds = time.monotonic() - began
            cpu_before = cpu_seconds(consumer_pid) if consumer_pid is not None else 0.0
            await _call(api, "PUT", f"{subscription}/state", "ACTIVE")
            await sink.wait_for(len(accepted), drain_timeout)
            cpu = cpu_seconds(consumer_pid) - cpu_before if consumer_pid is not None else 0.0
            await _call(api, "DELETE", subscription, None)
        result = _reconcile(sink, accepted)
        result["publish_throughput"] = round(len(accepted) / max(publish_seconds, 1e-6), 1)
        if consumer_pid is not None:
            result["consumer_cpu_us"] = round(cpu / max(result["delivered"], 1) * 1e6, 1)
        batch, numbers = sink.batches[0][1:] if sink.batches else ([], [])
        if batch:
            payload = b"[" + b",".join(_body(n) for n in numbers) + b"]"
            result["raw_batch_post_loop"] = await _ceiling(sink.url, payload, ",".join(batch), ceiling_seconds)
            result["vs_raw_batch_post"] = round(result["throughput"] / max(result["raw_batch_post_loop"], 1e-6), 3)
        return {"batch_size": batch_size, "message_bytes": len(_body(0)), **result}
    finally:
        await sink.stop()


def _reconcile(sink: _BatchSink, accepted: dict[str, int]) -> dict[str, Any]:
    ids = Counter(i for _, batch_ids, _ in sink.batches for i in batch_ids)
    numbers = Counter(n for _, _, batch_numbers in sink.batches for n in batch_numbers)
    missing = sum(1 for i in accepted if i not in ids)
    mangled = sum(1 for n in accepted.values() if n not in numbers) + sink.malformed
    arrivals = sorted(at for at, _, _ in sink.batches)
    first_batch = len(min(sink.batches)[1]) if sink.batches else 0
    span = arrivals[-1] - arrivals[0] if arrivals else 0.0
    delivered = sum(ids.values())
    return {
        "published": len(accepted),
        "delivered": delivered,
        "batches": len(sink.batches),
        "largest_batch": max((len(batch_ids) for _, batch_ids, _ in sink.batches), default=0),
        "missing": missing,
        "duplicates": sum(c - 1 for c in ids.values() if c > 1),
        "mangled": mangled,
        "void": missing > 0 or mangled > 0,
        "throughput": round((delivered - first_batch) / span, 1) if span > 0 else 0.0,
        "drain_seconds": round(span, 2),
    }


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"hermes exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise RuntimeError(f"hermes did not listen on {port} in {timeout} s")


def main() -> None:
    """The embedded broker, one ``hermes run`` and the scenario; prints the result as JSON."""
    messages = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    data_dir = Path(tempfile.mkdtemp(prefix="hermes-bench-batch-"))
    broker = EmbeddedBroker(data_dir / "kafka")
    broker.start()
    frontend, management = free_port(), free_port()
    argv = [sys.executable, "-m", "hermes", "run", "--data-dir", str(data_dir), "--kafka-bootstrap-servers"]
    argv += [broker.bootstrap_servers, "--frontend-port", str(frontend), "--management-port", str(management)]
    argv += ["--log-level", "WARNING", "--no-pipeline"]
    process = spawn_tied(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(management, process)
        _wait_for_port(frontend, process)
        result = asyncio.run(
            batch_throughput(
                f"http://127.0.0.1:{management}", f"http://127.0.0.1:{frontend}", messages, consumer_pid=process.pid
            )
        )
    finally:
        process.terminate()
        process.wait(30)
        broker.stop()
    print(json.dumps({"cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"), **result}, indent=2))


if __name__ == "__main__":
    alone(main)

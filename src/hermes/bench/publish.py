"""Publishing: closed-loop maximum and open-loop latency at fixed rates, each beside a no-op endpoint on the
same HTTP stack; and large messages, publish and delivery time with the processes' memory."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aiohttp

from hermes.bench.load import JSON_HEADERS, Sink, closed_loop, json_body, open_loop
from hermes.bench.stats import ratio, summarize, summarize_runs
from hermes.bench.system import Management, System, child, cpu_seconds, warm_up
from hermes.broker.embedded import free_port

BODY = json_body(1024)
_KEYS = ["throughput", "latency_ms.p50", "latency_ms.p99", "latency_ms.p999"]


async def _closed(url: str, seconds: float, concurrency: int, reps: int, pid: int) -> dict[str, Any]:
    """Closed-loop runs, with the CPU time the server process ``pid`` spent per request."""
    runs = []
    for _ in range(reps):
        before = cpu_seconds(pid)
        run = await closed_loop(url, BODY, seconds, concurrency)
        run["server_cpu_us"] = round((cpu_seconds(pid) - before) / max(run["requests"], 1) * 1e6, 1)
        runs.append(run)
    return {
        **summarize_runs(runs, [*_KEYS, "server_cpu_us"]),
        "codes": runs[-1]["codes"],
        "errors": sum(r["errors"] for r in runs),
    }


async def _open(url: str, rate: float, seconds: float, reps: int) -> dict[str, Any]:
    runs = [await open_loop(url, BODY, rate, seconds) for _ in range(reps)]
    return {
        "rate": rate,
        **summarize_runs(runs, _KEYS),
        "codes": runs[-1]["codes"],
        "errors": sum(r["errors"] for r in runs),
    }


async def _noop_runs(
    noop: str, seconds: float, concurrency: int, rates: list[float], reps: int, pid: int
) -> dict[str, Any]:
    await closed_loop(noop, BODY, 1.0, concurrency)  # warm-up, as for the frontend
    return {
        "closed": await _closed(noop, seconds, concurrency, reps, pid),
        "open": [await _open(noop, rate, seconds, reps) for rate in rates],
    }


async def publish(
    system: System, api: Management, seconds: float, concurrency: int, rates: list[float], reps: int
) -> dict[str, Any]:
    """Scenario 1. The open-loop rates are ``rates`` plus half the measured closed-loop maximum."""
    topic = await api.topic("benchp", "publish")
    url = f"{system.frontend}/topics/{topic}"
    await closed_loop(url, BODY, 1.0, concurrency)  # warm-up: connections, caches, the producer's metadata
    maximum = await _closed(url, seconds, concurrency, reps, system.processes["frontend"].pid)
    half = round(maximum["throughput"]["median"] / 2, -1)
    all_rates = sorted({*rates, half})
    opened = [await _open(url, rate, seconds, reps) for rate in all_rates]
    port = free_port()
    with child([sys.executable, "-m", "hermes.bench.noop", str(port)], port) as process:
        noop = await _noop_runs(f"http://127.0.0.1:{port}/topics/t", seconds, concurrency, all_rates, reps, process.pid)
    return {
        "body_bytes": len(BODY),
        "concurrency": concurrency,
        "seconds": seconds,
        "closed": maximum,
        "open": opened,
        "half_max_rate": half,
        "noop": noop,
        "ratio_to_noop": ratio(maximum["throughput"]["median"], noop["closed"]["throughput"]["median"]),
        # the same ratio from CPU per request: what one core could sustain, whatever else the machine runs
        "cpu_ratio_to_noop": ratio(noop["closed"]["server_cpu_us"]["median"], maximum["server_cpu_us"]["median"]),
    }


async def large_messages(system: System, sink: Sink, api: Management, sizes: list[int], count: int) -> dict[str, Any]:
    """Scenario 5: ``count`` messages of each size, one at a time, published and delivered to one subscription;
    time per message (publish answer, publish-to-delivery) and the peak memory of frontend and consumers. The
    ceiling is a raw POST of the same body to the same subscriber endpoint."""
    topic = await api.topic("benchl", "large", maxMessageSize=64 * 1024 * 1024)
    url = f"{system.frontend}/topics/{topic}"
    await api.subscription(topic, "large", sink.url("large"))
    if not await warm_up(system.frontend, topic, sink, ["large"]):
        return {"error": "the subscription never started receiving", "void": True}
    rows = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for size in sizes:
            body = json_body(size)
            before = system.memory()
            publish_times: list[float] = []
            delivery_times: list[float] = []
            raw_times: list[float] = []
            statuses: dict[str, int] = {}
            accepted: set[str] = set()
            sink.arrivals["large"] = []
            for _ in range(count):
                started = time.monotonic()
                async with session.post(url, data=body, headers=JSON_HEADERS) as r:
                    await r.read()
                    statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
                    message_id = r.headers.get("Hermes-Message-Id")
                publish_times.append(time.monotonic() - started)
                if r.status not in (201, 202) or not message_id:
                    continue
                accepted.add(message_id)
                if await sink.wait_for("large", len(accepted), 60):
                    delivery_times.append(sink.arrivals["large"][-1][1] - started)
                started = time.monotonic()
                async with session.post(sink.url("raw"), data=body, headers=JSON_HEADERS) as r:
                    await r.read()
                raw_times.append(time.monotonic() - started)
            await asyncio.sleep(0.2)
            missing = len(accepted - {m for m, _ in sink.arrivals["large"]})
            after = system.memory()
            rows.append(
                {
                    "bytes": size,
                    "statuses": statuses,
                    "publish_ms": summarize(t * 1e3 for t in publish_times),
                    "delivery_ms": summarize(t * 1e3 for t in delivery_times),
                    "raw_post_ms": summarize(t * 1e3 for t in raw_times),
                    "missing": missing,
                    "void": missing > 0,
                    "memory_kib": {
                        role: {
                            "rss_before": before[role].get("VmRSS", 0),
                            "rss_after": after[role].get("VmRSS", 0),
                            "peak": after[role].get("VmHWM", 0),
                        }
                        for role in ("frontend", "consumers")
                    },
                }
            )
    sink.arrivals.pop("raw", None)
    await api.remove_subscription(topic, "large")
    return {"count_per_size": count, "sizes": rows, "void": any(r["void"] for r in rows)}

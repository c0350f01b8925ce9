"""Publishing: the closed-loop maximum (wrk) of one frontend process and of two workers beside the fastest Python
no-op server, CPU per publish, and open-loop latency at fixed rates (hermes-openloop); and large messages, publish
and delivery time with the processes' memory."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import aiohttp

from hermes.bench import noop, openloop, wrk
from hermes.bench.load import JSON_HEADERS, Sink, json_body
from hermes.bench.stats import ratio, summarize, summarize_runs
from hermes.bench.system import Management, System, child, warm_up
from hermes.broker.embedded import free_port

BODY = json_body(1024)
# The closed-loop maxima also at this many connections, the benchmark's earlier setting: a publish waits about 3 ms
# for the broker's ack, so 32 in flight cap Hermes near 32 / 3 ms (Little's law), well below its CPU's limit.
ALSO_CONCURRENCY = 32
_KEYS = ["throughput", "latency_ms.p50", "latency_ms.p99", "latency_ms.p999", "cpu_us_per_request"]


def closed(
    url: str, seconds: float, concurrency: int, reps: int, pid: int, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """wrk runs (the maximum), with the CPU time the server (process ``pid`` and its children) spent per request."""
    wrk.run(url, BODY, 1.0, concurrency, headers=headers)  # warm-up: connections, caches, the producer's metadata
    runs = [wrk.run(url, BODY, seconds, concurrency, pid, headers) for _ in range(reps)]
    return {
        **summarize_runs(runs, ["throughput", "server_cpu_us"]),
        "requests": sum(r["requests"] for r in runs),
        "non_2xx": sum(r["non_2xx"] for r in runs),
        "socket_errors": sum(r["socket_errors"] for r in runs),
    }


def opened(url: str, rate: float, seconds: float, connections: int, reps: int) -> dict[str, Any]:
    """hermes-openloop runs at ``rate``: latency from each scheduled send, and the generator's own CPU per request."""
    openloop.run(url, BODY, rate, 1.0, connections, JSON_HEADERS)  # warm-up: connections, the server's caches
    runs = [openloop.run(url, BODY, rate, seconds, connections, JSON_HEADERS) for _ in range(reps)]
    return {
        "rate": rate,
        **summarize_runs(runs, _KEYS),
        "codes": runs[-1]["codes"],
        "errors": sum(r["errors"] + r["unanswered"] for r in runs),  # unanswered: never sent, or no answer
    }


def _noops(seconds: float, concurrency: int, reps: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The closed-loop maximum of each no-op server at ``concurrency`` and at ``ALSO_CONCURRENCY`` connections."""
    out, also = {}, {}
    for server in noop.SERVERS:
        port = free_port()
        with child([sys.executable, "-m", "hermes.bench.noop", server, str(port)], port) as process:
            url = f"http://127.0.0.1:{port}/topics/t"
            out[server] = closed(url, seconds, concurrency, reps, process.pid)
            also[server] = closed(url, seconds, ALSO_CONCURRENCY, reps, process.pid)
    return out, also


def _fastest(runs: dict[str, Any]) -> str:
    return max(runs, key=lambda name: runs[name]["throughput"]["median"])


async def publish(
    system: System, api: Management, seconds: float, concurrency: int, rates: list[float], reps: int
) -> dict[str, Any]:
    """Scenario 1: the maximum of one frontend process (at ``concurrency`` and ``ALSO_CONCURRENCY`` connections)
    and of two workers (wrk), beside the fastest no-op at the same concurrency; then latency at fixed rates
    (hermes-openloop, ``concurrency`` connections): ``rates``, half the one-process maximum and half the maximum at
    ``ALSO_CONCURRENCY``."""
    topic = await api.topic("benchp", "publish")
    url = f"{system.frontend}/topics/{topic}"
    pid = system.processes["frontend"].pid
    maximum = closed(url, seconds, concurrency, reps, pid)
    also = closed(url, seconds, ALSO_CONCURRENCY, reps, pid)
    with system.frontend_workers(2) as master:
        two_workers = closed(url, seconds, concurrency, reps, master.pid)
    half = round(maximum["throughput"]["median"] / 2, -1)
    half_also = round(also["throughput"]["median"] / 2, -1)
    fixed = [opened(url, rate, seconds, concurrency, reps) for rate in sorted({*rates, half, half_also})]
    noops, noops_also = _noops(seconds, concurrency, reps)
    fastest, fastest_also = _fastest(noops), _fastest(noops_also)
    return {
        "body_bytes": len(BODY),
        "concurrency": concurrency,
        "seconds": seconds,
        "generator": wrk.command(concurrency),
        "closed": maximum,
        "two_workers": two_workers,
        "open_generator": openloop.command(concurrency),
        "open": fixed,
        "half_max_rate": half,
        "noop": noops,
        "fastest_noop": fastest,
        "ratio_to_noop": ratio(maximum["throughput"]["median"], noops[fastest]["throughput"]["median"]),
        "also": {
            "concurrency": ALSO_CONCURRENCY,
            "closed": also,
            "half_max_rate": half_also,
            "noop": noops_also,
            "fastest_noop": fastest_also,
            "ratio_to_noop": ratio(also["throughput"]["median"], noops_also[fastest_also]["throughput"]["median"]),
        },
        # the same ratio from CPU per request: what one core could sustain, whatever else the machine runs
        "cpu_ratio_to_noop": ratio(noops[fastest]["server_cpu_us"]["median"], maximum["server_cpu_us"]["median"]),
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

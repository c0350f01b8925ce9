"""What subscriptions cost at rest and at a low rate each: N active SERIAL subscriptions with no traffic on one
consumers process, its CPU (as a share of one core) and resident memory against the same process with none;
then, with the most of them, publish-to-deliver latency at a few messages per second each."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any

from hermes.bench.delivery import _open, delivered
from hermes.bench.load import Sink
from hermes.bench.system import Management, System, cpu_seconds, memory_kib, run_alone, thread_cpu_seconds, warm_up

# Seconds each idle measurement lasts: long enough for every periodic task (heartbeats, metadata refreshes,
# metrics snapshots, offset commits) to run several times.
IDLE_SECONDS = 20.0


def _threads(pid: int) -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/task"))
    return 0


async def idle_cost(
    system: System, sink: Sink, management: Management, counts: tuple[int, ...], rate: float, seconds: float
) -> dict[str, Any]:
    """For each count in ``counts`` (ascending), that many subscriptions of one topic in all, each of them having
    received a message (its consumer reads from the topic's end), then ``IDLE_SECONDS`` with no traffic. Then
    ``rate`` messages/s to the topic for ``seconds`` (each message delivered to every subscription)."""
    pid = system.processes["consumers"].pid
    topic = await management.topic("bench", "idle", contentType="JSON")
    runs = [await _measure(pid, 0)]
    made = 0
    for count in counts:
        names = [f"idle{i}" for i in range(made, count)]
        for name in names:
            await management.subscription(topic, name, sink.url(name), inflightSize=10)
        made = count
        if not await warm_up(system.frontend, topic, sink, [f"idle{i}" for i in range(count)], within=300.0):
            raise RuntimeError(f"{count} subscriptions did not all receive a probe in 300 s")
        await asyncio.sleep(3.0)  # the probes' deliveries and commits settle
        runs.append(await _measure(pid, count))
    base = runs[0]
    for run in runs[1:]:
        run["per_subscription_cpu_pct"] = round((run["cpu_pct"] - base["cpu_pct"]) / run["subscriptions"], 4)
        run["per_subscription_kib"] = round((run["rss_kib"] - base["rss_kib"]) / run["subscriptions"], 1)
    names = [f"idle{i}" for i in range(made)]
    url = f"{system.frontend}/topics/{topic}"
    at_rate = await delivered(sink, names, lambda: _open(url, rate, seconds), 120.0, consumers_pid=pid)
    at_rate = {k: at_rate[k] for k in ("published", "missing", "duplicates", "latency_ms", "consumers_cpu_us")}
    return {
        "idle_seconds": IDLE_SECONDS,
        "runs": runs,
        "at_rate": {"subscriptions": made, "rate_each": rate, "seconds": seconds, **at_rate},
    }


async def _measure(pid: int, subscriptions: int) -> dict[str, Any]:
    threads_before = thread_cpu_seconds(pid)
    before, started = cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(IDLE_SECONDS)
    used, elapsed = cpu_seconds(pid) - before, time.monotonic() - started
    threads_after = thread_cpu_seconds(pid)
    by_thread = {
        name: round((threads_after[name] - threads_before.get(name, 0.0)) / elapsed * 100, 2)
        for name in threads_after
        if threads_after[name] - threads_before.get(name, 0.0) > 0
    }
    return {
        "subscriptions": subscriptions,
        "cpu_pct": round(used / elapsed * 100, 2),
        "rss_kib": memory_kib(pid).get("VmRSS", 0),
        "threads": _threads(pid),
        "cpu_pct_by_thread": dict(sorted(by_thread.items(), key=lambda kv: -kv[1])[:8]),
    }


def main() -> None:
    counts = tuple(int(c) for c in sys.argv[1:]) or (10, 100, 1000)

    async def scenario(system: System, sink: Sink, management: Management) -> dict[str, Any]:
        return await idle_cost(system, sink, management, counts, 2.0, 20.0)

    import json

    print(json.dumps(asyncio.run(run_alone(scenario)), indent=1))


if __name__ == "__main__":
    main()

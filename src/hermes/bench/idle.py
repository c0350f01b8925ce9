"""What subscriptions cost at rest and at a low rate each: N active SERIAL subscriptions (ten to a topic) with no
traffic on one consumers process, its CPU (as a share of one core) and resident memory against the same process
with none; then, with the most of them, publish-to-deliver latency at a few messages per second each."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any

from hermes.bench.delivery import _open
from hermes.bench.interrupt import alone
from hermes.bench.load import Sent, Sink, gc_paused
from hermes.bench.stats import first_arrivals, latency_ms, reconcile
from hermes.bench.system import Management, System, cpu_seconds, memory_kib, run_alone, thread_cpu_seconds, warm_up

# Seconds each idle measurement lasts: long enough for every periodic task (heartbeats, metadata refreshes,
# metrics snapshots, offset commits) to run several times.
IDLE_SECONDS = 20.0
# Subscriptions to a topic: an installation's topics have a few each (one topic with a thousand would make each
# message a burst of a thousand deliveries; the fan-out scenario measures that shape up to a hundred)
PER_TOPIC = 10
# Seconds from the probes' last delivery to the idle measurement: what their traffic leaves runs first (commits, a
# metrics snapshot of every consumer until one under 10 s old says nothing moved, the freeze of the new consumers'
# objects 5 s after the last started). Measured apart, as the cost of having just had traffic, not of rest.
SETTLE_SECONDS = 12.0


def _threads(pid: int) -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/task"))
    return 0


async def idle_cost(
    system: System,
    sink: Sink,
    management: Management,
    counts: tuple[int, ...],
    rate: float,
    seconds: float,
    per_topic: int = PER_TOPIC,
) -> dict[str, Any]:
    """For each count in ``counts`` (ascending), that many subscriptions in all, ``per_topic`` to a topic, each of
    them having received a message (its consumer reads from its topic's end), then ``IDLE_SECONDS`` with no
    traffic. Then ``rate`` messages/s to every topic for ``seconds``: ``rate`` deliveries/s to each subscription."""
    pid = system.processes["consumers"].pid
    topics: dict[str, list[str]] = {}
    runs = [await _measure(pid, 0)]
    for count in counts:
        made = sum(map(len, topics.values()))
        for i in range(made, count):
            if i % per_topic == 0:
                topics[await management.topic("bench", f"idle{i // per_topic}", contentType="JSON")] = []
            topic = list(topics)[i // per_topic]
            await management.subscription(topic, f"idle{i}", sink.url(f"idle{i}"), inflightSize=10)
            topics[topic].append(f"idle{i}")
        warm = await asyncio.gather(*(warm_up(system.frontend, t, sink, names, 300.0) for t, names in topics.items()))
        if not all(warm):
            raise RuntimeError(f"{count} subscriptions did not all receive a probe in 300 s")
        before, started = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(SETTLE_SECONDS)
        settling = (cpu_seconds(pid) - before) / (time.monotonic() - started) * 100
        runs.append({**await _measure(pid, count), "settling_cpu_pct": round(settling, 2)})
    base = runs[0]
    for run in runs[1:]:
        run["per_subscription_cpu_pct"] = round((run["cpu_pct"] - base["cpu_pct"]) / run["subscriptions"], 4)
        run["per_subscription_kib"] = round((run["rss_kib"] - base["rss_kib"]) / run["subscriptions"], 1)
    at_rate = await _at_rate(system, sink, topics, rate, seconds, pid)
    subscriptions = sum(map(len, topics.values()))
    return {
        "idle_seconds": IDLE_SECONDS,
        "settle_seconds": SETTLE_SECONDS,
        "per_topic": per_topic,
        "runs": runs,
        "at_rate": {"subscriptions": subscriptions, "rate_each": rate, "seconds": seconds, **at_rate},
    }


async def _at_rate(
    system: System, sink: Sink, topics: dict[str, list[str]], rate: float, seconds: float, pid: int
) -> dict[str, Any]:
    """``rate`` messages/s to each topic at once; every accepted message reconciled for each subscription of its
    topic, latency from its scheduled publish to its first arrival."""
    for names in topics.values():
        for name in names:
            sink.arrivals[name] = []
    cpu_before = cpu_seconds(pid)

    async def publish(index: int, topic: str) -> Sent:
        # each topic's schedule starts a little later than the one before: publishers are not in step, and in
        # step every topic's message would come at the same instant, a burst of them all
        await asyncio.sleep(index / (rate * len(topics)))
        return await _open(f"{system.frontend}/topics/{topic}", rate, seconds)

    with gc_paused():  # the sink records arrival times in this process
        sent = await asyncio.gather(*(publish(i, t) for i, t in enumerate(topics)))
        deadline = time.monotonic() + 120.0
        for names, accepted in zip(topics.values(), sent, strict=True):
            for name in names:
                await sink.wait_for(name, len(accepted.accepted), max(0.1, deadline - time.monotonic()))
    cpu = cpu_seconds(pid) - cpu_before
    latencies: list[float] = []
    missing = duplicates = 0
    for names, accepted in zip(topics.values(), sent, strict=True):
        for name in names:
            got = sink.arrivals.get(name, [])
            reconciliation = reconcile(accepted.accepted, (m for m, _ in got))
            missing, duplicates = missing + reconciliation.missing, duplicates + reconciliation.duplicates
            latencies += [at - scheduled for scheduled, at in first_arrivals(accepted.accepted, got)]
    return {
        "published": sum(len(s.accepted) for s in sent),
        "missing": missing,
        "duplicates": duplicates,
        "latency_ms": latency_ms(latencies),
        "consumers_cpu_us": round(cpu / max(len(latencies), 1) * 1e6, 1),
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
    alone(main)

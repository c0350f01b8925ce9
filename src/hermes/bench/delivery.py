"""Publish-to-delivery measurements: SERIAL fan-out to 1/10/100 subscriptions and a slow subscriber beside a
fast one. Every accepted message is reconciled against what each subscription received."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hermes.bench.kafka_alone import fanout_latency
from hermes.bench.load import Sent, Sink, closed_loop, gc_paused, json_body, open_loop, publish_count
from hermes.bench.stats import first_arrivals, latency_ms, reconcile, summarize, summarize_runs
from hermes.bench.system import Management, System, cpu_seconds, warm_up

BODY = json_body(1024)
# How long a drain's consumers process is watched at rest before its subscription is activated: /proc counts
# CPU in 10 ms ticks, so 2 s tell rest from half a percent of a core.
REST_SECONDS = 2.0
# Scenario 2 drains a backlog of its burst and of this many times as many: a cost per delivery apart from the start.
DRAIN_SCALE = 5


async def delivered(
    sink: Sink,
    names: list[str],
    publish: Callable[[], Awaitable[Sent]],
    drain_timeout: float,
    reconciled_only: tuple[str, ...] = (),
    consumers_pid: int | None = None,
) -> dict[str, Any]:
    """Runs ``publish``, waits until every subscription in ``names`` and ``reconciled_only`` got every accepted
    message (or the timeout), and reconciles them all. Latency (from each message's scheduled publish time to
    its first arrival) and throughput are those of ``names``."""
    for name in (*names, *reconciled_only):
        sink.arrivals[name] = []
    cpu_before = cpu_seconds(consumers_pid) if consumers_pid else 0.0
    with gc_paused():  # the sink records arrival times in this process
        sent = await publish()
        expected = len(sent.accepted)
        deadline = time.monotonic() + drain_timeout
        first_at: tuple[float, int] | None = None
        if sent.consumers_cpu_from is not None and consumers_pid:
            # The deliveries begin later (a subscription activated): the CPU up to the first arrival is its start,
            # counted apart from the deliveries' (with the arrivals made by the time this process woke up).
            await sink.wait_for(names[0], 1, max(0.1, deadline - time.monotonic()))
            first_at = cpu_seconds(consumers_pid), len(sink.arrivals.get(names[0], []))
        for name in (*names, *reconciled_only):
            await sink.wait_for(name, expected, max(0.1, deadline - time.monotonic()))
        # at once (the waits end with the arrival that completes them): not after the reconciliation below
        cpu_after = cpu_seconds(consumers_pid) if consumers_pid else 0.0
    latencies: list[float] = []
    first, last = float("inf"), 0.0
    reconciliations = []
    arrivals = 0
    for name in names:
        got = sink.arrivals.get(name, [])
        reconciliations.append(reconcile(sent.accepted, (m for m, _ in got)))
        for scheduled, at in first_arrivals(sent.accepted, got):
            arrivals += 1
            latencies.append(at - scheduled)
            first, last = min(first, at), max(last, at)
    for name in reconciled_only:
        reconciliations.append(reconcile(sent.accepted, (m for m, _ in sink.arrivals.get(name, []))))
    missing = sum(r.missing for r in reconciliations)
    if sent.consumers_cpu_from is not None:
        cpu_before = sent.consumers_cpu_from
    cpu = cpu_after - cpu_before if consumers_pid else 0.0
    split = _start_apart(cpu_before, first_at, cpu_after, arrivals) if first_at else {}
    return {
        "consumers_cpu_us": round(cpu / max(arrivals, 1) * 1e6, 1),
        **split,
        "published": expected,
        "rejected": sum(v for k, v in sent.codes.items() if k not in (201, 202)) + sent.errors,
        "codes": {str(k): v for k, v in sorted(sent.codes.items())},
        "errors": sent.errors,
        "deliveries": arrivals,
        "missing": missing,
        "duplicates": sum(r.duplicates for r in reconciliations),
        "void": missing > 0,
        "throughput": round(arrivals / (last - first), 1) if last > first else 0.0,
        "latency_ms": latency_ms(latencies),
    }


def _start_apart(activated: float, first: tuple[float, int], last: float, deliveries: int) -> dict[str, float]:
    """A drain's CPU (seconds, at the activation, at the first arrival with the arrivals by then, at the last)
    split at its first delivery: µs per delivery from the first arrival to the last, and ms from the activation
    to the first delivery (less the deliveries made by then at that cost). What Kafka's client prefetched before
    the first delivery falls in the second."""
    at_first, delivered_by_then = first
    after = deliveries - delivered_by_then
    per_delivery = (last - at_first) / after if after > 0 else 0.0
    return {
        "cpu_us_first_to_last": round(per_delivery * 1e6, 1),
        "cpu_ms_to_first": round(max(0.0, at_first - activated - delivered_by_then * per_delivery) * 1e3, 1),
    }


def _fold(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ["throughput", "latency_ms.p50", "latency_ms.p99", "latency_ms.max", "consumers_cpu_us"]
    keys += [k for k in ("cpu_us_first_to_last", "cpu_ms_to_first", "rest_cpu_pct") if runs and k in runs[0]]
    return {
        **summarize_runs(runs, keys),
        "missing": sum(r["missing"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "void": any(r["void"] for r in runs),
        "runs": runs,
    }


async def serial_fanout(
    system: System, sink: Sink, api: Management, subscriptions: int, burst: int, rate: float, seconds: float, reps: int
) -> dict[str, Any]:
    """``subscriptions`` SERIAL subscriptions on one topic: latency at a fixed publish rate, beside the same
    through Kafka alone; then delivery throughput of a burst of ``burst`` messages (deliveries/s over all
    subscriptions)."""
    topic = await api.topic("benchs", f"fanout{subscriptions}", maxMessageSize=1024 * 1024)
    names = [f"f{subscriptions}x{i}" for i in range(subscriptions)]
    for name in names:
        await api.subscription(topic, name, sink.url(name))
    if not await warm_up(system.frontend, topic, sink, names):
        return {"error": "the subscriptions never started receiving", "void": True}
    url = f"{system.frontend}/topics/{topic}"
    drain = 60.0 + burst * subscriptions / 500
    pid = system.processes["consumers"].pid
    latency_runs = [
        await delivered(sink, names, lambda: _open(url, rate, seconds), drain, consumers_pid=pid) for _ in range(reps)
    ]
    throughput_runs = [
        await delivered(sink, names, lambda: publish_count(url, BODY, burst, 32), drain, consumers_pid=pid)
        for _ in range(reps)
    ]
    latency: dict[str, Any] = {"publish_rate": rate, "seconds": seconds, **_fold(latency_runs)}
    out: dict[str, Any] = {
        "subscriptions": subscriptions,
        "latency": latency,
        "throughput": {"burst": burst, **_fold(throughput_runs)},
    }
    if subscriptions == 1:
        # A burst to one subscription is delivered while it is being published: it measures the whole system
        # on the machine's cores (deliveries end with the last publish). A backlog drain is the consumer's own.
        out["drain"] = await _drains(sink, api, topic, names[0], url, burst, pid, reps)
    for name in names:
        await api.remove_subscription(topic, name)
    # after the subscriptions are gone, so that their idle consumers do not share the broker with it
    latency["kafka_alone"] = kafka = await kafka_alone(
        system.broker.bootstrap_servers, subscriptions, rate, seconds, reps
    )
    if "error" not in kafka:
        latency["ratio_to_kafka_alone"] = {
            q: round(latency[f"latency_ms.{q}"]["median"] / max(kafka[f"latency_ms.{q}"]["median"], 1e-3), 2)
            for q in ("p50", "p99")
        }
    return out


async def _drains(
    sink: Sink, api: Management, topic: str, name: str, url: str, count: int, pid: int, reps: int
) -> dict[str, Any]:
    """``reps`` pairs of backlog drains, of ``count`` and of ``DRAIN_SCALE`` times as many, each pair in the
    reverse order of the one before. A drain of N costs the subscription's start plus N times a cost per
    delivery: the pair's difference gives the cost per delivery, and the smaller drain less N times it the start.
    (The CPU from the first arrival to the last leaves out what Kafka's client fetched before the first
    delivery, up to its prefetch bound: shown, not judged.)"""
    drain_timeout = 60.0 + count * DRAIN_SCALE / 500
    runs: dict[int, list[dict[str, Any]]] = {count: [], count * DRAIN_SCALE: []}
    for rep in range(reps):
        for n in sorted(runs, reverse=rep % 2 == 1):
            rest: list[float] = []
            backlog = functools.partial(_backlog, api, topic, name, url, n, pid, rest)
            run = await delivered(sink, [name], backlog, drain_timeout, consumers_pid=pid)
            runs[n].append({**run, "rest_cpu_pct": rest[0]})
    small, large = runs[count], runs[count * DRAIN_SCALE]
    costs = [_per_delivery_and_start(s, large_run) for s, large_run in zip(small, large, strict=True)]
    larger = {"messages": count * DRAIN_SCALE, **_fold(large)}
    return {
        "messages": count,
        **_fold(small),
        "consumers_cpu_us_per_delivery": summarize(per for per, _ in costs),
        "start_cpu_ms": summarize(start for _, start in costs),
        "larger": larger,
        # the larger drains' messages count as the smaller's: one missing voids the scenario
        "missing": sum(r["missing"] for r in small + large),
        "duplicates": sum(r["duplicates"] for r in small + large),
        "void": any(r["void"] for r in small + large),
    }


def _per_delivery_and_start(small: dict[str, Any], large: dict[str, Any]) -> tuple[float, float]:
    """From two drains' CPU from the activation (µs per delivery times deliveries): the cost per delivery (µs)
    and the subscription's start (ms of CPU)."""
    cpu_small = small["consumers_cpu_us"] * small["deliveries"]
    cpu_large = large["consumers_cpu_us"] * large["deliveries"]
    per = (cpu_large - cpu_small) / max(large["deliveries"] - small["deliveries"], 1)
    return round(per, 1), round((cpu_small - per * small["deliveries"]) / 1000, 1)


async def kafka_alone(bootstrap: str, consumers: int, rate: float, seconds: float, reps: int) -> dict[str, Any]:
    """The ceiling of ``serial_fanout``'s latency: the same messages at the same rate from a plain producer to
    ``consumers`` plain consumers, each in a group of its own as each subscription is, on the same broker;
    publish-to-consume latency, every message reconciled for every consumer."""
    try:
        with gc_paused():  # the consumers' threads record arrival times in this process
            runs = await asyncio.to_thread(fanout_latency, bootstrap, consumers, rate, seconds, reps, len(BODY))
    except RuntimeError as exc:
        return {"error": str(exc), "void": True}
    folded = [{"latency_ms": latency_ms(r.latencies), "missing": r.missing, "duplicates": r.duplicates} for r in runs]
    missing = sum(r.missing for r in runs)
    return {
        "consumers": consumers,
        **summarize_runs(folded, ["latency_ms.p50", "latency_ms.p99", "latency_ms.max"]),
        "missing": missing,
        "duplicates": sum(r.duplicates for r in runs),
        "void": missing > 0,
        "runs": folded,
    }


async def subscription_start(system: System, sink: Sink, api: Management, reps: int) -> dict[str, Any]:
    """Seconds from asking for a new subscription to its first delivery: one message is published as soon as
    the subscription exists, and the consumer must be started and have joined its group to deliver it."""
    topic = await api.topic("benchs", "start")
    url = f"{system.frontend}/topics/{topic}"
    seconds, missing = [], 0
    for rep in range(reps):
        name = f"start{rep}"
        sink.arrivals[name] = []
        began = time.monotonic()
        await api.subscription(topic, name, sink.url(name))
        sent = await publish_count(url, BODY, 1, 1)
        if sent.accepted and await sink.wait_for(name, 1, 60.0):
            seconds.append(sink.arrivals[name][0][1] - began)
        else:
            missing += 1
        await api.remove_subscription(topic, name)
    return {"seconds": summarize(seconds), "missing": missing, "void": missing > 0}


async def _backlog(
    api: Management, topic: str, name: str, url: str, count: int, consumers_pid: int, rest: list[float]
) -> Sent:
    """Publishes ``count`` messages while the subscription is suspended, then activates it: its consumer drains
    them alone (throughput counts from its first delivery, so its group join is left out; the consumers' CPU from
    the activation, so its start is in and what the process did while the backlog was published is not). Appends
    to ``rest`` the consumers process's CPU at rest just before the activation, in % of a core, which the drain's
    window counts too."""
    await api.state(topic, name, "SUSPENDED")
    await asyncio.sleep(2.0)  # the consumer stops and commits first
    sent = await publish_count(url, BODY, count, 32)
    at_rest = cpu_seconds(consumers_pid)
    await asyncio.sleep(REST_SECONDS)
    sent.consumers_cpu_from = cpu_seconds(consumers_pid)
    rest.append(round((sent.consumers_cpu_from - at_rest) / REST_SECONDS * 100, 2))
    await api.state(topic, name, "ACTIVE")
    return sent


async def _open(url: str, rate: float, seconds: float) -> Sent:
    sent = Sent()
    await open_loop(url, BODY, rate, seconds, sent=sent)
    return sent


async def slow_beside_fast(
    system: System, sink: Sink, api: Management, rate: float, seconds: float, reps: int, slow_delay: float
) -> dict[str, Any]:
    """The fast subscription's publish-to-delivery latency alone; beside a second fast subscription (the
    control: what any second subscription costs); and beside a subscription whose endpoint takes
    ``slow_delay`` seconds per answer. Slowness must not move it: compare with the control.
    Each phase has a topic of its own, so that each starts on an empty topic whatever the phases before it left."""
    drain = 60.0
    phases: dict[str, Any] = {}
    for phase, other, delay in (
        ("fast_alone", None, 0.0),
        ("fast_beside_fast", "control", 0.0),
        ("fast_beside_slow", "slow", slow_delay),
    ):
        topic = await api.topic("benchs", f"slowfast-{phase}")
        url = f"{system.frontend}/topics/{topic}"
        await api.subscription(topic, "fast", sink.url("fast"))
        if other is not None:
            await sink.set_delay(other, delay)
            await api.subscription(topic, other, sink.url(other), inflightSize=200)
        if not await warm_up(system.frontend, topic, sink, ["fast", *([other] if other else [])]):
            return {"error": f"{phase}: the subscriptions never started receiving", "void": True}
        others = (other,) if other else ()
        runs = [
            await delivered(sink, ["fast"], functools.partial(_open, url, rate, seconds), drain, reconciled_only=others)
            for _ in range(reps)
        ]
        phases[phase] = _fold(runs)
        for name in ("fast", *others):
            await api.remove_subscription(topic, name)
        if other is not None:
            await sink.set_delay(other, 0.0)

    def p99(phase: str) -> float:
        return float(phases[phase]["latency_ms.p99"]["median"])

    return {
        "publish_rate": rate,
        "slow_delay_s": slow_delay,
        **phases,
        "p99_ratio": round(p99("fast_beside_slow") / max(p99("fast_alone"), 1e-3), 2),
        "p99_ratio_to_control": round(p99("fast_beside_slow") / max(p99("fast_beside_fast"), 1e-3), 2),
        "void": any(p["void"] for p in phases.values()),
    }


async def raw_post_ceiling(sink: Sink, seconds: float, concurrency: int, reps: int) -> dict[str, Any]:
    """The delivery ceiling: one process POSTing 1 KB to the same subscriber endpoint, ``concurrency`` in
    flight, with the same HTTP client library as the consumers."""
    runs = []
    for _ in range(reps):
        runs.append(await closed_loop(sink.url("raw"), BODY, seconds, concurrency))
        sink.arrivals.pop("raw", None)
    return {"concurrency": concurrency, **summarize_runs(runs, ["throughput"])}


async def busy_machine(
    system: System, sink: Sink, api: Management, rate: float, seconds: float, reps: int
) -> dict[str, Any]:
    """Publish-to-deliver latency of one SERIAL subscription at ``rate``, on the machine alone and then with two
    processes burning a core each beside the system (as other work on a shared machine would)."""
    topic = await api.topic("benchs", "busy", maxMessageSize=1024 * 1024)
    await api.subscription(topic, "busy", sink.url("busy"))
    if not await warm_up(system.frontend, topic, sink, ["busy"]):
        return {"error": "the subscription never started receiving", "void": True}
    url = f"{system.frontend}/topics/{topic}"
    pid = system.processes["consumers"].pid
    quiet = [
        await delivered(sink, ["busy"], lambda: _open(url, rate, seconds), 60.0, consumers_pid=pid) for _ in range(reps)
    ]
    burners = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass", stdin=subprocess.DEVNULL)
        for _ in range(2)
    ]
    try:
        busy = [
            await delivered(sink, ["busy"], lambda: _open(url, rate, seconds), 60.0, consumers_pid=pid)
            for _ in range(reps)
        ]
    finally:
        for burner in burners:
            burner.kill()
            await burner.wait()
    await api.remove_subscription(topic, "busy")
    return {"publish_rate": rate, "seconds": seconds, "quiet": _fold(quiet), "busy": _fold(busy)}

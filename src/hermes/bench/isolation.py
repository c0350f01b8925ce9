"""Failing subscriptions beside a healthy one (the sibling of scenario 4, a slow subscription beside a fast one):
the healthy subscription's publish-to-delivery p50 and p90 and its delivery rate, beside two subscriptions of the
same topic whose endpoints always time out (requestTimeout 200 ms) or always answer 500, against the same alone.
The target: the figures beside stay within 10 % of those alone.

Phases come in pairs (beside, then alone), so that the machine's changing load falls on both sides alike; each
pair gives the ratios beside/alone, and the figures are their medians. "Beside" is the failing subscriptions'
steady state: a phase starts once their rate limiters slowed them down (their first second's attempts are
bounded by their rate and inflightSize, and not measured). "Alone": they are suspended and their endpoints hear
nothing more. The failing endpoints run in a child process, Hermes in its own, so that neither takes the other's
interpreter lock, nor the sink's.

``python -m hermes.bench.isolation [PAIRS]`` runs it alone on a fresh system and prints its section of the report.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from hermes.bench.delivery import BODY, delivered
from hermes.bench.failing import FailingEndpoint
from hermes.bench.interrupt import alone
from hermes.bench.load import Sent, Sink, open_loop
from hermes.bench.system import Management, System, print_pairs_alone, run_alone, warm_up

TARGET = 0.10  # beside / alone may exceed 1 by this much (p50, p90) or fall short of it (rate)
RATE = 160.0  # messages per second: 400 a 2.5 s phase, so that a phase's p50 varies by ~3 %, not ~6 %
SECONDS = 2.5
PAIRS = 4
FIGURES = ("p50", "p90", "rate")


async def failing_beside_healthy(
    system: System, sink: Sink, api: Management, rate: float, seconds: float, pairs: int
) -> dict[str, Any]:
    topic = await api.topic("benchs", "isolation")
    url = f"{system.frontend}/topics/{topic}"
    await api.subscription(topic, "healthy", sink.url("healthy"), messageTtl=60)
    if not await warm_up(system.frontend, topic, sink, ["healthy"]):
        return {"error": "the healthy subscription never started receiving", "void": True}
    endpoints = {"timing_out": FailingEndpoint(200, delay=30.0), "answering_500": FailingEndpoint(500)}
    try:
        for name, endpoint in endpoints.items():
            timeout = 200 if name == "timing_out" else 1000
            await api.subscription(topic, name, endpoint.url, rate=400, requestTimeout=timeout)
        async with aiohttp.ClientSession() as session:
            failing = _Failing(api, topic, endpoints, session)
            pid = system.processes["consumers"].pid
            return await _pairs(api, topic, sink, url, rate, seconds, pairs, failing, pid)
    finally:
        for endpoint in endpoints.values():
            endpoint.stop()


class _Failing:
    """The failing subscriptions: their state, and the attempts their endpoints hear."""

    def __init__(
        self, api: Management, topic: str, endpoints: dict[str, FailingEndpoint], session: aiohttp.ClientSession
    ) -> None:
        self._api, self._topic, self._endpoints, self._session = api, topic, endpoints, session

    async def attempts(self) -> list[int]:
        return [await e.received(self._session) for e in self._endpoints.values()]

    async def attempts_within(self, seconds: float) -> list[int]:
        before = await self.attempts()
        await asyncio.sleep(seconds)
        return [n - b for n, b in zip(await self.attempts(), before, strict=True)]

    async def state(self, state: str) -> None:
        for name in self._endpoints:
            await self._api.state(self._topic, name, state)


async def _until(check: Callable[[], Awaitable[bool]], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.1)
    return False


async def _pairs(
    api: Management,
    topic: str,
    sink: Sink,
    url: str,
    rate: float,
    seconds: float,
    pairs: int,
    failing: _Failing,
    pid: int,
) -> dict[str, Any]:
    """The phases; ``pid``: the consumers process, whose CPU per delivery to the healthy one is reported too
    (beside, it includes the failing subscriptions' attempts)."""

    async def publish(span: float) -> Sent:
        sent = Sent()
        await open_loop(url, BODY, rate, span, sent=sent)
        return sent

    async def failing_again() -> str | None:  # they joined their groups, attempt, and their limiters slowed down
        before = await failing.attempts()
        deadline = time.monotonic() + 60.0
        while not await _all_more(failing, before):  # published again until they joined their groups
            if time.monotonic() > deadline:
                return "the failing subscriptions never attempted a delivery"
            await publish(0.5)
            await asyncio.sleep(0.5)
        if not await _until(lambda: _throttled(failing), 10.0):  # the slow rate: 1 attempt a second
            return "the failing subscriptions' limiters never slowed down"
        return None

    async def measure() -> dict[str, Any]:
        return await delivered(sink, ["healthy"], functools.partial(publish, seconds), 60.0, consumers_pid=pid)

    async def quiet() -> bool:  # the failing consumers stopped: their endpoints hear nothing more
        return await failing.attempts_within(0.5) == [0, 0]

    phases: dict[str, list[dict[str, Any]]] = {"beside": [], "alone": []}
    for pair in range(pairs):
        if pair:
            await failing.state("ACTIVE")
        if error := await failing_again():
            return {"error": error, "void": True}
        phases["beside"].append(await measure())
        await failing.state("SUSPENDED")
        if not await _until(quiet, 20.0):
            return {"error": "the suspended failing subscriptions kept attempting", "void": True}
        phases["alone"].append(await measure())
    for name in ("healthy", "timing_out", "answering_500"):
        await api.remove_subscription(topic, name)
    figures = {side: [_figures(run) for run in runs] for side, runs in phases.items()}
    ratios = {
        q: [round(b[q] / max(a[q], 1e-9), 3) for b, a in zip(figures["beside"], figures["alone"], strict=True)]
        for q in FIGURES
    }
    medians = {q: round(statistics.median(values), 3) for q, values in ratios.items()}
    runs = [*phases["beside"], *phases["alone"]]
    return {
        "publish_rate": rate,
        "seconds": seconds,
        "pairs": pairs,
        "target": TARGET,
        "figures": figures,
        "ratios": ratios,
        "median_ratios": medians,
        "met": {q: medians[q] <= 1 + TARGET if q != "rate" else medians[q] >= 1 - TARGET for q in FIGURES},
        "missing": sum(r["missing"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "void": any(r["void"] for r in runs),
    }


async def _all_more(failing: _Failing, before: list[int]) -> bool:
    return all(n > b for n, b in zip(await failing.attempts(), before, strict=True))


async def _throttled(failing: _Failing) -> bool:
    return max(await failing.attempts_within(0.5)) <= 1


def _figures(run: dict[str, Any]) -> dict[str, float]:
    return {
        "p50": run["latency_ms"]["p50"],
        "p90": run["latency_ms"]["p90"],
        "rate": run["throughput"],
        "consumers_cpu_us": run["consumers_cpu_us"],
    }


def markdown(result: dict[str, Any]) -> list[str]:
    """The scenario's section of the report."""
    lines = ["", "### 4b. Failing subscriptions beside a healthy one", ""]
    if "error" in result:
        return [*lines, result["error"]]
    beside, alone = result["figures"]["beside"], result["figures"]["alone"]
    target = result["target"]
    lines += [
        f"Publishing {result['publish_rate']:,.0f} msg/s to a topic with a healthy subscription and two failing ones "
        "(one times out, requestTimeout 200 ms; one answers 500), in their limiters' slow or heartbeat mode; "
        f"{result['pairs']} pairs of {result['seconds']} s phases (beside, then with the failing ones suspended). "
        f"Missing {result['missing']}, duplicates {result['duplicates']}.",
        "",
        "| healthy subscription | beside (per pair) | alone (per pair) | beside / alone, median (per pair) | target |",
        "|---|---|---|---|---|",
    ]
    for q, label, bound in (
        ("p50", "p50 ms", f"≤ {1 + target:.2f}"),
        ("p90", "p90 ms", f"≤ {1 + target:.2f}"),
        ("rate", "deliveries/s", f"≥ {1 - target:.2f}"),
    ):
        lines.append(
            f"| {label} | {', '.join(f'{f[q]:,.1f}' for f in beside)} | {', '.join(f'{f[q]:,.1f}' for f in alone)} "
            f"| **{result['median_ratios'][q]:.3f}** ({', '.join(f'{r:.3f}' for r in result['ratios'][q])}) "
            f"| {bound}: **{'met' if result['met'][q] else 'not met'}** |"
        )
    cpu = [statistics.median(f["consumers_cpu_us"] for f in side) for side in (beside, alone)]
    lines += [
        "",
        f"The consumers process's CPU per delivery to the healthy subscription (median of the phases, µs; beside, "
        f"the failing subscriptions' attempts included): beside **{cpu[0]:,.0f}**, alone **{cpu[1]:,.0f}**.",
    ]
    return lines


async def _alone(pairs: int) -> dict[str, Any]:
    return await run_alone(lambda system, sink, api: failing_beside_healthy(system, sink, api, RATE, SECONDS, pairs))


if __name__ == "__main__":
    alone(lambda: print_pairs_alone(_alone, PAIRS, markdown))

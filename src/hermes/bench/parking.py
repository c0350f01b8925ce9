"""Retries that never block a partition (``retryParking``): a healthy subscription's delivery throughput beside a
subscription of the same topic whose subscriber answers 503 to one request in ten, with a long backoff (5 s, so
that every failed message is parked: threshold 1 s), against the same alone (that subscription suspended).
The target: beside / alone at least 0.90.

Phases come in pairs (beside, then alone), as in ``isolation.py``, so that the machine's changing load falls on
both sides alike; the figure is the median of the pairs' ratios. The parking subscription's parked messages come
back 5 s after their failure, so from the second phase on its unparked deliveries run beside the healthy one too.

``python -m hermes.bench.parking [PAIRS]`` runs it alone on a fresh system and prints its section of the report.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
from typing import Any

import aiohttp

from hermes.bench.delivery import BODY, delivered
from hermes.bench.failing import FailingEndpoint
from hermes.bench.interrupt import alone
from hermes.bench.load import Sent, Sink, open_loop
from hermes.bench.system import Management, System, print_pairs_alone, run_alone, warm_up

TARGET = 0.90  # beside / alone, deliveries per second of the healthy subscription
RATE = 300.0  # messages per second
SECONDS = 5.0
PAIRS = 3
BACKOFF_MS = 5000
THRESHOLD_MS = 1000
FAILING_ONE_IN = 10


async def healthy_beside_parking(
    system: System, sink: Sink, api: Management, rate: float, seconds: float, pairs: int
) -> dict[str, Any]:
    topic = await api.topic("benchs", "parking")
    url = f"{system.frontend}/topics/{topic}"
    await api.subscription(topic, "healthy", sink.url("healthy"), messageTtl=60)
    if not await warm_up(system.frontend, topic, sink, ["healthy"]):
        return {"error": "the healthy subscription never started receiving", "void": True}
    endpoint = FailingEndpoint(503, every=FAILING_ONE_IN)
    try:
        await api.subscription(
            topic,
            "parking",
            endpoint.url,
            messageTtl=600,
            messageBackoff=BACKOFF_MS,
            retryParking={"thresholdMs": THRESHOLD_MS},
        )
        async with aiohttp.ClientSession() as session:
            pid = system.processes["consumers"].pid

            async def publish(span: float) -> Sent:
                sent = Sent()
                await open_loop(url, BODY, rate, span, sent=sent)
                return sent

            async def measure() -> dict[str, Any]:
                return await delivered(sink, ["healthy"], functools.partial(publish, seconds), 60.0, consumers_pid=pid)

            phases: dict[str, list[dict[str, Any]]] = {"beside": [], "alone": []}
            before = await endpoint.received(session)
            for pair in range(pairs):
                if pair:
                    await api.state(topic, "parking", "ACTIVE")
                    await asyncio.sleep(1.0)  # its consumer starts again
                phases["beside"].append(await measure())
                await api.state(topic, "parking", "SUSPENDED")
                await asyncio.sleep(1.0)  # its consumer stops
                phases["alone"].append(await measure())
            attempts = await endpoint.received(session) - before
        for name in ("healthy", "parking"):
            await api.remove_subscription(topic, name)
    finally:
        endpoint.stop()
    rates = {side: [run["throughput"] for run in runs] for side, runs in phases.items()}
    ratios = [round(b / max(a, 1e-9), 3) for b, a in zip(rates["beside"], rates["alone"], strict=True)]
    median = round(statistics.median(ratios), 3)
    runs = [*phases["beside"], *phases["alone"]]
    return {
        "publish_rate": rate,
        "seconds": seconds,
        "pairs": pairs,
        "target": TARGET,
        "rates": rates,
        "ratios": ratios,
        "median_ratio": median,
        "met": median >= TARGET,
        "parking_attempts": attempts,
        "consumers_cpu_us": {side: statistics.median(r["consumers_cpu_us"] for r in rs) for side, rs in phases.items()},
        "missing": sum(r["missing"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "void": any(r["void"] for r in runs),
    }


def markdown(result: dict[str, Any]) -> list[str]:
    """The scenario's section of the report."""
    lines = ["", "### 4c. A healthy subscription beside one parking its failures", ""]
    if "error" in result:
        return [*lines, result["error"]]
    rates, cpu = result["rates"], result["consumers_cpu_us"]
    lines += [
        f"Publishing {result['publish_rate']:,.0f} msg/s to a topic with a healthy subscription and one whose "
        f"subscriber answers 503 to one request in {FAILING_ONE_IN} (messageBackoff {BACKOFF_MS} ms, retryParking "
        f"thresholdMs {THRESHOLD_MS}: every failure parked); {result['pairs']} pairs of {result['seconds']} s phases "
        f"(beside, then with the parking one suspended). Its subscriber heard {result['parking_attempts']:,} "
        f"requests. Missing {result['missing']}, duplicates {result['duplicates']} (the healthy one).",
        "",
        "| healthy subscription | beside (per pair) | alone (per pair) | beside / alone, median (per pair) | target |",
        "|---|---|---|---|---|",
        f"| deliveries/s | {', '.join(f'{r:,.1f}' for r in rates['beside'])} "
        f"| {', '.join(f'{r:,.1f}' for r in rates['alone'])} "
        f"| **{result['median_ratio']:.3f}** ({', '.join(f'{r:.3f}' for r in result['ratios'])}) "
        f"| ≥ {result['target']:.2f}: **{'met' if result['met'] else 'not met'}** |",
        "",
        f"The consumers process's CPU per delivery to the healthy subscription (median of the phases, µs; beside, the "
        f"parking subscription's work included): beside **{cpu['beside']:,.0f}**, alone **{cpu['alone']:,.0f}**.",
    ]
    return lines


async def _alone(pairs: int) -> dict[str, Any]:
    return await run_alone(lambda system, sink, api: healthy_beside_parking(system, sink, api, RATE, SECONDS, pairs))


if __name__ == "__main__":
    alone(lambda: print_pairs_alone(_alone, PAIRS, markdown))

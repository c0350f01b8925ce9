"""Sustained delivery: one SERIAL subscription at a fixed rate for minutes. Its first window's p99 beside its
last shows whether the system slows down as the run goes on (a growing backlog, a leak, a broker whose reads
cost more as a partition grows); the memory of the broker and of the Hermes processes is taken before and
after. Every accepted message is reconciled, as in the other scenarios."""

from __future__ import annotations

from typing import Any

from hermes.bench.delivery import BODY, delivered
from hermes.bench.load import Sent, Sink, open_loop
from hermes.bench.stats import edge_windows, first_arrivals, latency_ms
from hermes.bench.system import Management, System, warm_up


async def sustained(
    system: System, sink: Sink, api: Management, rate: float, seconds: float, window: float
) -> dict[str, Any]:
    topic = await api.topic("benchs", "sustained")
    name = "sustained"
    await api.subscription(topic, name, sink.url(name))
    if not await warm_up(system.frontend, topic, sink, [name]):
        return {"error": "the subscription never started receiving", "void": True}
    sent = Sent()

    async def publish() -> Sent:
        await open_loop(f"{system.frontend}/topics/{topic}", BODY, rate, seconds, sent=sent)
        return sent

    before = system.memory()
    overall = await delivered(sink, [name], publish, 120.0, consumers_pid=system.processes["consumers"].pid)
    after = system.memory()
    samples = [(scheduled, at - scheduled) for scheduled, at in first_arrivals(sent.accepted, sink.arrivals[name])]
    first, last = (latency_ms(values) for values in edge_windows(samples, window))
    sink.arrivals.pop(name, None)
    await api.remove_subscription(topic, name)
    return {
        "publish_rate": rate,
        "seconds": seconds,
        "window_s": window,
        **overall,
        "first_window_latency_ms": first,
        "last_window_latency_ms": last,
        "p99_last_to_first": round(last["p99"] / max(first["p99"], 1e-3), 2),
        "memory_kib": {"before": before, "after": after},
    }

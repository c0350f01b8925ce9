"""The pure arithmetic of the benchmark: percentiles, summaries over repetitions, open-loop schedules and the
reconciliation of what was published against what each subscriber received."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1): the smallest value with at least ``q`` of the values at or
    below it. Never interpolates, so the figure is a latency some request really had. 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def latency_ms(values: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/p99.9/max of latencies given in seconds, in milliseconds."""
    points = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p999": 0.999}
    out = {name: round(percentile(values, q) * 1e3, 2) for name, q in points.items()}
    out["max"] = round(max(values) * 1e3, 2) if values else 0.0
    return out


def summarize(values: Iterable[float]) -> dict[str, float]:
    """The median of repetitions with their min and max."""
    data = list(values)
    if not data:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "n": 0}
    return {
        "median": round(statistics.median(data), 2),
        "min": round(min(data), 2),
        "max": round(max(data), 2),
        "n": len(data),
    }


def summarize_runs(runs: Sequence[Mapping[str, Any]], keys: Iterable[str]) -> dict[str, dict[str, float]]:
    """``summarize`` for each numeric key (dotted for nested dicts, e.g. ``latency.p99``) of several runs."""

    def get(run: Mapping[str, Any], dotted: str) -> float:
        value: Any = run
        for part in dotted.split("."):
            value = value[part]
        return float(value)

    return {key: summarize(get(run, key) for run in runs) for key in keys}


def first_arrivals(scheduled: Mapping[str, float], arrivals: Iterable[tuple[str, float]]) -> list[tuple[float, float]]:
    """``(scheduled, arrived)`` of each published message's first arrival, in arrival order; repeats and ids
    that were never published are left out."""
    seen: set[str] = set()
    out = []
    for message_id, at in arrivals:
        if message_id in scheduled and message_id not in seen:
            seen.add(message_id)
            out.append((scheduled[message_id], at))
    return out


def edge_windows(samples: Sequence[tuple[float, float]], window: float) -> tuple[list[float], list[float]]:
    """The values of the ``(time, value)`` samples whose time falls in the first ``window`` seconds of the
    run and in its last ``window`` seconds (the run spans the first to the last sample's time)."""
    if not samples:
        return [], []
    began = min(t for t, _ in samples)
    ended = max(t for t, _ in samples)
    first = [v for t, v in samples if t < began + window]
    last = [v for t, v in samples if t > ended - window]
    return first, last


def ratio(value: float, ceiling: float) -> float:
    return round(value / ceiling, 3) if ceiling > 0 else 0.0


def schedule(rate: float, seconds: float) -> list[float]:
    """Send times (seconds from the start) of an open-loop load at a fixed ``rate``. Latency is measured from
    these times, not from when a send actually left: a stalled system is charged for the requests it delayed
    (no coordinated omission)."""
    if rate <= 0 or seconds <= 0:
        return []
    return [i / rate for i in range(int(rate * seconds))]


def achieved_rate(scheduled: Sequence[float], completed_at: Sequence[float]) -> float:
    """Completed requests per second over the span from the first scheduled send to the last completion."""
    if not scheduled or not completed_at:
        return 0.0
    span = max(completed_at) - min(scheduled)
    return len(completed_at) / span if span > 0 else 0.0


@dataclass(frozen=True)
class Reconciliation:
    """What one subscriber received compared with what the frontend accepted."""

    published: int
    received: int  # distinct published messages that arrived
    missing: int
    duplicates: int  # extra arrivals of a message (allowed: at-least-once)
    unexpected: int  # arrivals of ids that were never published in this run

    @property
    def complete(self) -> bool:
        return self.missing == 0

    def to_dict(self) -> dict[str, int | bool]:
        return {
            "published": self.published,
            "received": self.received,
            "missing": self.missing,
            "duplicates": self.duplicates,
            "unexpected": self.unexpected,
            "complete": self.complete,
        }


def reconcile(published: Iterable[str], arrivals: Iterable[str]) -> Reconciliation:
    """Counts every accepted message id against the ids a subscriber received (each arrival listed, repeats
    included). A run with any missing message is void."""
    expected = set(published)
    counts: dict[str, int] = {}
    for message_id in arrivals:
        counts[message_id] = counts.get(message_id, 0) + 1
    received = sum(1 for m in counts if m in expected)
    return Reconciliation(
        published=len(expected),
        received=received,
        missing=len(expected) - received,
        duplicates=sum(c - 1 for m, c in counts.items() if m in expected),
        unexpected=sum(c for m, c in counts.items() if m not in expected),
    )

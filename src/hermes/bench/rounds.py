"""Variants measured in turn, round after round, each round in the reverse order of the one before (A, B; B, A;
...), so that a machine whose load drifts during a scenario favours none of them. A variant's figure beside the
baseline's is the median over rounds of its ratio to the baseline's run of the same round (scenarios 1b, 1c)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from hermes.bench.stats import ratio, summarize


def alternated(
    variants: Sequence[str], rounds: int, run: Callable[[str], dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """``run(variant)``'s figures, each variant's in the order of the rounds."""
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in variants}
    for turn in range(rounds):
        for variant in variants if turn % 2 == 0 else reversed(variants):
            runs[variant].append(run(variant))
    return runs


def median_ratio(runs: list[dict[str, Any]], baseline: list[dict[str, Any]], key: str) -> dict[str, Any]:
    each = [ratio(r[key], b[key]) for r, b in zip(runs, baseline, strict=True)]
    return {"median": round(statistics.median(each), 3), "rounds": each}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A variant's wrk runs (each with the load average at its start): median and range, and each run."""
    return {
        "throughput": summarize(r["throughput"] for r in runs),
        "cpu_us_per_publish": summarize(r["server_cpu_us"] for r in runs),
        "non_2xx": sum(r["non_2xx"] for r in runs),
        "runs": [{k: r[k] for k in ("throughput", "server_cpu_us", "load")} for r in runs],
    }

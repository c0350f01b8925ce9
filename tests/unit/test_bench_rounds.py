"""Scenarios 1b and 1c measure their variants in alternating rounds and judge the median of per-round ratios."""

from __future__ import annotations

from typing import Any

import pytest

from hermes.bench.rounds import alternated, median_ratio

pytestmark = pytest.mark.unit


def test_each_round_runs_the_variants_in_the_reverse_order_of_the_one_before() -> None:
    order: list[str] = []

    def run(variant: str) -> dict[str, Any]:
        order.append(variant)
        return {"throughput": float(len(order))}

    runs = alternated(("a", "b", "c"), 4, run)
    assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"]
    assert [r["throughput"] for r in runs["a"]] == [1.0, 6.0, 7.0, 12.0]


def test_the_ratio_is_the_median_over_rounds_of_each_rounds_ratio() -> None:
    baseline = [{"throughput": t} for t in (1000.0, 400.0, 800.0)]  # a machine whose load drifts
    variant = [{"throughput": t} for t in (800.0, 480.0, 720.0)]
    assert median_ratio(variant, baseline, "throughput") == {"median": 0.9, "rounds": [0.8, 1.2, 0.9]}

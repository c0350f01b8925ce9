"""The benchmark's arithmetic: percentiles, open-loop schedules and reconciliation."""

from __future__ import annotations

import pytest

from hermes.bench.stats import achieved_rate, latency_ms, percentile, reconcile, schedule, summarize

pytestmark = pytest.mark.unit


def test_percentile_is_nearest_rank_and_never_interpolates() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 0.999) == 100.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([], 0.5) == 0.0


def test_latency_ms_converts_seconds_and_keeps_the_worst_case() -> None:
    out = latency_ms([0.001] * 999 + [0.5])
    assert out["p50"] == 1.0
    assert out["p99"] == 1.0
    assert out["p999"] == 1.0
    assert out["max"] == 500.0


def test_summary_is_the_median_with_min_and_max() -> None:
    assert summarize([3.0, 1.0, 10.0]) == {"median": 3.0, "min": 1.0, "max": 10.0, "n": 3}


def test_open_loop_schedule_is_fixed_by_the_rate_not_by_answers() -> None:
    times = schedule(4, 1.5)
    assert times == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    assert schedule(0, 10) == []


def test_a_stall_is_charged_to_every_request_scheduled_during_it() -> None:
    # 10 requests scheduled 0.1 s apart; the system stalls for 1 s and then answers everything at once.
    scheduled = schedule(10, 1.0)
    answered_at = [1.0] * len(scheduled)
    latencies = [a - s for a, s in zip(answered_at, scheduled, strict=True)]
    assert percentile(latencies, 0.5) == pytest.approx(0.5)  # not the ~0 ms a closed loop would record
    assert achieved_rate(scheduled, answered_at) == pytest.approx(10.0)


def test_reconciliation_counts_missing_duplicate_and_unexpected_messages() -> None:
    result = reconcile(["a", "b", "c"], ["a", "b", "b", "x"])
    assert (result.published, result.received, result.missing, result.duplicates, result.unexpected) == (
        3,
        2,
        1,
        1,
        1,
    )
    assert not result.complete
    assert reconcile(["a"], ["a", "a"]).complete

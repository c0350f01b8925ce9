"""The benchmark's arithmetic: percentiles, open-loop schedules, a run's windows, reconciliation, what voids a
run."""

from __future__ import annotations

import pytest

from hermes.bench.report import _footprint, _publish, _publish_auth, _publish_tracing
from hermes.bench.stats import (
    achieved_rate,
    edge_windows,
    first_arrivals,
    latency_ms,
    percentile,
    reconcile,
    schedule,
    summarize,
)
from hermes.bench.suite import void_reasons

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


def test_first_arrivals_keep_each_published_message_once_with_its_schedule() -> None:
    scheduled = {"a": 1.0, "b": 2.0}
    arrivals = [("b", 2.5), ("x", 2.6), ("a", 3.0), ("b", 3.5)]
    assert first_arrivals(scheduled, arrivals) == [(2.0, 2.5), (1.0, 3.0)]


def test_edge_windows_take_the_first_and_the_last_seconds_of_the_run() -> None:
    # one sample a second for 10 s, its value the second it was sent at
    samples = [(100.0 + t, float(t)) for t in range(10)]
    first, last = edge_windows(samples, 3.0)
    assert first == [0.0, 1.0, 2.0]
    assert last == [7.0, 8.0, 9.0]
    assert edge_windows([], 3.0) == ([], [])


def test_a_tail_that_grows_during_a_sustained_run_shows_in_the_last_window_p99() -> None:
    # 1,000 msg/s for 60 s: 1 ms throughout, but the last 10 s have 2% of their messages at 30 ms
    samples = [(i / 1000, 0.030 if i >= 50_000 and i % 50 == 0 else 0.001) for i in range(60_000)]
    first, last = (latency_ms(values)["p99"] for values in edge_windows(samples, 10.0))
    assert (first, last) == (1.0, 30.0)


def test_a_missing_message_voids_the_sustained_run_and_the_kafka_alone_ceiling() -> None:
    scenarios = {
        "serial": [{"subscriptions": 1, "latency": {"void": False, "kafka_alone": {"void": True}}}],
        "sustained": {"void": True},
        "startup": {"void": True, "error": "`hermes run --no-pipeline` was not ready within 180 s"},
    }
    assert void_reasons(scenarios) == [
        "Kafka alone x1 latency: missing messages",
        "sustained: missing messages",
        "startup: `hermes run --no-pipeline` was not ready within 180 s",
    ]


def test_the_report_renders_the_publish_with_authentication_scenario() -> None:
    def run(rate: float, cpu: float) -> dict[str, object]:
        return {
            "throughput": {"median": rate, "min": rate - 100, "max": rate + 100},
            "server_cpu_us": {"median": cpu, "min": cpu, "max": cpu},
            "non_2xx": 0,
        }

    scenario = {
        "seconds": 4.0,
        "concurrency": 32,
        "without_auth": run(10_000, 43.0),
        "with_basic": run(8_500, 50.7),
        "cpu_ratio": 1.18,
        "throughput_ratio": 0.85,
    }
    text = "\n".join(_publish_auth(scenario))
    assert "| msg/s | **10,000** (9,900-10,100) | **8,500** (8,400-8,600) | **0.85** | ≥ 0.9: **not met** |" in text
    assert "| server CPU µs per publish | **43.0** (43.0-43.0) | **50.7** (50.7-50.7) | **1.18** | |" in text
    assert "Not measured." in "\n".join(_publish_auth(None))


def test_the_publish_report_judges_the_maximum_and_shows_the_32_connection_one_beside_it() -> None:
    def closed(rate: float, cpu: float) -> dict[str, object]:
        return {
            "throughput": {"median": rate, "min": rate, "max": rate},
            "server_cpu_us": {"median": cpu, "min": cpu, "max": cpu},
            "non_2xx": 0,
        }

    def opened(rate: float, p99: float) -> dict[str, object]:
        latency = {"median": p99, "min": p99, "max": p99}
        throughput = {"median": rate, "min": rate, "max": rate}
        return {
            "rate": rate,
            "throughput": throughput,
            "latency_ms.p50": latency,
            "latency_ms.p99": latency,
            "latency_ms.p999": latency,
        }

    scenario = {
        "generator": "wrk -t1 -c128",
        "concurrency": 128,
        "closed": closed(30_000, 35.0),
        "two_workers": closed(36_000, 70.0),
        "noop": {"granian": closed(50_000, 23.0)},
        "fastest_noop": "granian",
        "ratio_to_noop": 0.6,
        "cpu_ratio_to_noop": 0.66,
        "half_max_rate": 15_000.0,
        "open": [opened(5_500.0, 5.5), opened(15_000.0, 30.0)],
        "also": {
            "concurrency": 32,
            "closed": closed(11_000, 41.0),
            "half_max_rate": 5_500.0,
            "noop": {"uvicorn": closed(36_000, 27.0)},
            "fastest_noop": "uvicorn",
            "ratio_to_noop": 0.306,
        },
    }
    text = "\n".join(_publish(scenario))
    assert "| closed loop, 128 connections: msg/s | **30,000** (30,000-30,000) | **50,000** (50,000-50,000) " in text
    assert "| **0.6** | ≥ 0.5: **met** |" in text
    assert (
        "| closed loop, 32 connections: msg/s | **11,000** (11,000-11,000) | **36,000** (36,000-36,000) (uvicorn) "
        in text
    )
    assert "| 5,500 (5,500) |" in text and "| half the maximum at 32 connections |" in text
    assert "| 15,000 (15,000) |" in text and "p99 < 5 ms at half the maximum: **not met**" in text
    del scenario["also"]  # a result from before the maxima were taken at two concurrencies
    assert "32 connections" not in "\n".join(_publish(scenario))
    assert "Idempotency-Key" not in text  # nor the fresh-key variant
    scenario["idempotency_key"] = {
        "plain": closed(30_000, 35.0),
        "keyed": closed(28_500, 37.0),
        "throughput_ratio": 0.95,
        "cpu_ratio": 1.057,
    }
    keyed = "\n".join(_publish(scenario))
    assert (
        "| a new `Idempotency-Key` per request: msg/s | **28,500** (28,500-28,500) "
        "| plain, runs in turn: **30,000** (30,000-30,000) | **0.95** | ≥ 0.9: **met** |" in keyed
    )
    assert "| **1.057** |" in keyed


def test_the_report_renders_the_publish_with_tracing_scenario() -> None:
    def run(rate: float, cpu: float, spans: int | None = None) -> dict[str, object]:
        figures: dict[str, object] = {
            "throughput": {"median": rate, "min": rate, "max": rate},
            "server_cpu_us": {"median": cpu, "min": cpu, "max": cpu},
        }
        return figures if spans is None else {**figures, "spans_exported": spans}

    scenario = {
        "seconds": 4.0,
        "concurrency": 32,
        "sampler_ratio": 0.1,
        "off": run(7_000, 40.0),
        "off_traceparent": run(6_900, 41.0),
        "always_on": run(3_500, 160.0, 80_000),
        "ratio": run(6_650, 46.0, 9_000),
        "cpu_ratio": {"off_traceparent": 1.03, "always_on": 4.0, "ratio": 1.15},
        "throughput_ratio": {"off_traceparent": 0.99, "always_on": 0.5, "ratio": 0.95},
    }
    text = "\n".join(_publish_tracing(scenario))
    assert "| off | **7,000** (7,000-7,000) | | **40.0** (40.0-40.0) | | | |" in text
    assert "| off, the publisher sends a `traceparent` | **6,900** (6,900-6,900) | **0.99** |" in text
    assert "| on, every trace | **3,500** (3,500-3,500) | **0.5** | **160.0** (160.0-160.0) | **4.0** | 80,000 " in text
    assert "| ≥ 0.9: **not met** |" in text
    assert "| on, sampled 0.1 | **6,650** (6,650-6,650) | **0.95** |" in text
    assert "| ≥ 0.9: **met** |" in text
    assert "Not measured." in "\n".join(_publish_tracing(None))


def test_the_report_renders_the_default_installs_memory() -> None:
    figures = {
        "command": "hermes run",
        "idle_seconds": 300.0,
        "processes": {"Kafka broker (JVM)": {"rss_mib": 200.0, "pss_mib": 180.0}},
        "total_rss_mib": 1030.0,
        "total_pss_mib": 900.0,
        "target_mib": 1024,
        "lake_files": 3,
    }
    text = "\n".join(_footprint(figures))
    assert "| Kafka broker (JVM) | 200 | 180 |" in text
    assert "| **the tree** | **1030** | **900** |" in text
    assert "Target: under 1,024 MiB (PSS: pages shared between the processes counted once): **met**." in text
    assert _footprint(None) == []

"""The benchmark's arithmetic: percentiles, open-loop schedules, a run's windows, reconciliation, what voids a
run."""

from __future__ import annotations

import pytest

from hermes.bench.report import _footprint, _publish, _publish_auth, _publish_overhead
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
    def variant(rate: float, cpu: float) -> dict[str, object]:
        runs = [{"throughput": rate, "server_cpu_us": cpu, "load": load} for load in (1.5, 2.5)]
        return {
            "throughput": {"median": rate, "min": rate - 100, "max": rate + 100},
            "cpu_us_per_publish": {"median": cpu, "min": cpu, "max": cpu},
            "non_2xx": 0,
            "runs": runs,
        }

    scenario = {
        "seconds": 4.0,
        "rounds": 2,
        "concurrency": 128,
        "generator": "wrk -t1 -c128 (1 thread, keep-alive, POST)",
        "without_auth": variant(10_000, 43.0),
        "with_basic": variant(8_500, 50.7),
        "cpu_ratio": {"median": 1.18, "rounds": [1.1, 1.26]},
        "throughput_ratio": {"median": 0.85, "rounds": [0.8, 0.9]},
    }
    text = "\n".join(_publish_auth(scenario))
    assert "2 round(s) of 4 s runs" in text
    assert "each round in the reverse order of the one before" in text
    assert "Load average over the runs: 1.5-2.5." in text
    expected = (
        "| msg/s | **10,000** (9,900-10,100) | **8,500** (8,400-8,600) | **0.850** (0.800-0.900) | ≥ 0.9: **not met** |"
    )
    assert expected in text
    assert (
        "| server CPU µs per publish | **43.0** (43.0-43.0) | **50.7** (50.7-50.7) | **1.180** (1.100-1.260) | |"
        in text
    )
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
    assert "Idempotency-Key" not in text  # measured beside tracing, in section 1c


def test_the_report_renders_the_keyed_and_traced_publishing_beside_plain() -> None:
    def variant(rates: list[float], cpus: list[float], ratios: list[float] | None = None) -> dict[str, object]:
        figures: dict[str, object] = {
            "throughput": {"median": rates[1], "min": min(rates), "max": max(rates)},
            "cpu_us_per_publish": {"median": cpus[1], "min": min(cpus), "max": max(cpus)},
            "non_2xx": 0,
            "runs": [
                {"throughput": r, "server_cpu_us": c, "load": 3.5 + i}
                for i, (r, c) in enumerate(zip(rates, cpus, strict=True))
            ],
        }
        if ratios is not None:
            figures["throughput_ratio"] = {"median": ratios[1], "rounds": ratios}
            figures["cpu_ratio"] = {"median": round(1 / ratios[1], 3), "rounds": [round(1 / r, 3) for r in ratios]}
        return figures

    scenario = {
        "seconds": 4.0,
        "rounds": 3,
        "connections": 128,
        "pause_ms": None,
        "sampler_ratio": 0.01,
        "generator": "wrk -t1 -c128",
        "plain": variant([10_000, 11_000, 12_000], [40.0, 41.0, 42.0]),
        "keyed": variant([8_000, 8_800, 9_000], [50.0, 51.0, 52.0], [0.78, 0.8, 0.82]),
        "ratio": variant([10_000, 10_500, 11_000], [42.0, 43.0, 44.0], [0.93, 0.955, 0.97]),
        "always": variant([2_000, 2_400, 2_500], [150.0, 160.0, 170.0], [0.2, 0.218, 0.25]),
        "spans_exported": 60_000,
    }
    text = "\n".join(_publish_overhead(scenario))
    assert "### 1c." in text and "3 round(s) of 4 s runs," in text and "Load average over the runs: 3.5-5.5." in text
    assert "| plain | **11,000** (10,000-12,000) | | **41.0** (40.0-42.0) | | 0 | |" in text
    assert (
        "| a new `Idempotency-Key` per publish | **8,800** (8,000-9,000) | **0.800** (0.780-0.820) "
        "| **51.0** (50.0-52.0) | **1.250** (1.220-1.282) | 0 | CPU ≤ 1.1, msg/s ≥ 0.9: **not met** |" in text
    )
    assert "| `--tracing`, sampled 0.01 (`parentbased_traceidratio`) | **10,500** (10,000-11,000) " in text
    assert (
        "| **0.955** (0.930-0.970) | **43.0** (42.0-44.0) | **1.047** (1.031-1.075) | 0 "
        "| CPU ≤ 1.1, msg/s ≥ 0.9: **met** |" in text
    )
    assert "| `--tracing`, every trace (`always_on`) |" in text and "| (information) |" in text
    assert "60,000" in text
    scenario["keyed"]["throughput_ratio"] = {"median": 0.95, "rounds": [0.95]}  # as fast, at 1.25 times the CPU
    assert "| **1.250** (1.220-1.282) | 0 | CPU ≤ 1.1, msg/s ≥ 0.9: **not met** |" in "\n".join(
        _publish_overhead(scenario)
    )
    assert "Not measured." in "\n".join(_publish_overhead(None))


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

"""Scenario 2's backlog drains: a cost per delivery apart from the subscription's start, and the report judging
the target on the cost per delivery."""

from __future__ import annotations

import pytest

from hermes.bench.delivery import _per_delivery_and_start, _start_apart
from hermes.bench.report import _drain

pytestmark = pytest.mark.unit


def test_two_drains_give_the_cost_per_delivery_and_the_start() -> None:
    # 6,000 for 330 ms of CPU and 30,000 for 1,530 ms: 50 µs a delivery, and a start of 30 ms
    small = {"consumers_cpu_us": 55.0, "deliveries": 6000}
    large = {"consumers_cpu_us": 51.0, "deliveries": 30000}
    assert _per_delivery_and_start(small, large) == (50.0, 30.0)


def test_a_drain_split_at_its_first_delivery() -> None:
    # activation at 10.0 s; at the first arrival 10.03 s with 2 delivered; the last of 6,000 at 10.33 s
    split = _start_apart(10.0, (10.03, 2), 10.33, 6000)
    per_delivery = 0.30 / 5998
    assert split["cpu_us_first_to_last"] == round(per_delivery * 1e6, 1) == 50.0
    # the 2 deliveries made before the sample are not charged to the start
    assert split["cpu_ms_to_first"] == round((0.03 - 2 * per_delivery) * 1e3, 1) == 29.9
    assert _start_apart(1.0, (1.02, 1), 1.02, 1) == {"cpu_us_first_to_last": 0.0, "cpu_ms_to_first": 20.0}


def _figure(median: float) -> dict[str, float]:
    return {"median": median, "min": median - 1, "max": median + 1}


def test_the_report_judges_the_drain_on_its_cost_per_delivery_and_shows_its_start_apart() -> None:
    drain = {
        "messages": 6000,
        "throughput": _figure(15000),
        "consumers_cpu_us": _figure(55.0),
        "consumers_cpu_us_per_delivery": _figure(48.0),
        "start_cpu_ms": _figure(30.0),
        "cpu_us_first_to_last": _figure(45.0),
        "rest_cpu_pct": _figure(1.5),
        "larger": {"messages": 30000, "consumers_cpu_us": _figure(49.0)},
        "missing": 0,
        "duplicates": 0,
    }
    text = _drain(drain, _figure(14000))
    assert "ratio to raw POST **1.07** (target ≥ 0.8: **met**)" in text
    assert "per delivery **48.0** (47.0-49.0) (target ≤ 50: **met**; from pairs of drains of 6,000 and 30,000" in text
    assert "start **30.0** (29.0-31.0) ms of CPU per activation" in text
    assert "start included: **55.0** (54.0-56.0) µs per delivery (30,000: **49.0** (48.0-50.0))" in text
    assert "first arrival to the last **45.0** (44.0-46.0)" in text
    assert "at rest just before each activation: **1.5** (0.5-2.5) % of a core" in text


def test_a_run_from_before_is_judged_the_old_way() -> None:
    drain = {"messages": 6000, "throughput": _figure(15053), "consumers_cpu_us": _figure(65.0)}
    text = _drain({**drain, "missing": 0, "duplicates": 0}, _figure(13708))
    assert "per delivery from the activation **65** (64-66) (target ≤ 50: **not met**)" in text

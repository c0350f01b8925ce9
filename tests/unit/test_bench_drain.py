"""Scenario 2's backlog drain: its CPU split into a cost per delivery and the subscription's start, and the
report judging the target on the cost per delivery."""

from __future__ import annotations

import pytest

from hermes.bench.delivery import _start_apart
from hermes.bench.report import _drain

pytestmark = pytest.mark.unit


def test_a_drains_cpu_is_split_into_its_start_and_a_cost_per_delivery() -> None:
    # activation at 10.0 s; at the first arrival 10.03 s with 2 delivered; the last of 6,000 at 10.33 s
    split = _start_apart(10.0, (10.03, 2), 10.33, 6000)
    per_delivery = 0.30 / 5998
    assert split["consumers_cpu_us_per_delivery"] == round(per_delivery * 1e6, 1) == 50.0
    # the 2 deliveries made before the sample are not charged to the start
    assert split["start_cpu_ms"] == round((0.03 - 2 * per_delivery) * 1e3, 1) == 29.9


def test_the_split_of_a_drain_of_one_message_has_no_cost_per_delivery() -> None:
    assert _start_apart(1.0, (1.02, 1), 1.02, 1) == {"consumers_cpu_us_per_delivery": 0.0, "start_cpu_ms": 20.0}


def _figure(median: float) -> dict[str, float]:
    return {"median": median, "min": median - 1, "max": median + 1}


def test_the_report_judges_the_drain_on_its_cost_per_delivery_and_shows_its_start_apart() -> None:
    drain = {
        "messages": 6000,
        "throughput": _figure(15000),
        "consumers_cpu_us": _figure(55.0),
        "consumers_cpu_us_per_delivery": _figure(48.0),
        "start_cpu_ms": _figure(30.0),
        "rest_cpu_pct": _figure(1.5),
        "missing": 0,
        "duplicates": 0,
    }
    text = _drain(drain, _figure(14000))
    assert "ratio to raw POST **1.07** (target ≥ 0.8: **met**)" in text
    assert "per delivery (from the first delivery to the last) **48.0** (47.0-49.0) (target ≤ 50: **met**)" in text
    assert "its first delivery) **30.0** (29.0-31.0) ms of CPU" in text
    assert "start included, **55.0** (54.0-56.0) µs per delivery" in text
    assert "at rest just before the activation **1.5** (0.5-2.5) % of a core" in text


def test_a_run_from_before_the_split_is_judged_the_old_way() -> None:
    drain = {"messages": 6000, "throughput": _figure(15053), "consumers_cpu_us": _figure(65.0)}
    text = _drain({**drain, "missing": 0, "duplicates": 0}, _figure(13708))
    assert "per delivery from the activation **65** (64-66) (target ≤ 50: **not met**)" in text

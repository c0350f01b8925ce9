import pytest

from hermes.consumers import subscription_metrics as metrics_module
from hermes.consumers.subscription_metrics import RECENT_ATTEMPTS, SubscriptionMetrics

pytestmark = pytest.mark.unit


def test_recent_attempts_keep_the_last_attempts_within_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(metrics_module.time, "monotonic", lambda: clock[0])
    metrics = SubscriptionMetrics("g.t", "s")
    metrics.response(None, timed_out=False)
    metrics.snapshot()
    clock[0] += 100  # seconds without an attempt: the per-second figures fall to zero, the recent ones stay
    snapshot = metrics.snapshot()
    assert snapshot["otherErrorsPerSecond"] == 0
    assert snapshot["recentAttempts"]["otherErrors"] == 1

    for _ in range(RECENT_ATTEMPTS):
        metrics.response(200, timed_out=False)
    recent = metrics.snapshot()["recentAttempts"]
    assert recent["codes2xx"] == RECENT_ATTEMPTS and recent["otherErrors"] == 0  # pushed out by newer ones

    metrics.response(503, timed_out=False)
    clock[0] += metrics_module.RECENT_WINDOW_S + 1
    assert sum(metrics.snapshot()["recentAttempts"].values()) == 0  # too old


def test_an_unchanged_subscription_is_not_snapshotted_again_until_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(metrics_module.time, "monotonic", lambda: clock[0])
    metrics = SubscriptionMetrics("g.t", "s")
    metrics.gauges(0, 100.0, "NORMAL", 0)
    metrics.snapshot()
    clock[0] += 1
    assert metrics.unchanged(10.0)
    metrics.gauges(0, 50.0, "SLOW", 0)
    assert not metrics.unchanged(10.0)  # a gauge moved
    metrics.snapshot()

    metrics.response(200, timed_out=False)
    metrics.count("delivered")
    assert not metrics.unchanged(10.0)
    clock[0] += 2
    assert metrics.snapshot()["deliveredPerSecond"] == 0.5
    clock[0] += 1
    assert not metrics.unchanged(10.0)  # its per-second figures fall to zero: said once
    assert metrics.snapshot()["deliveredPerSecond"] == 0
    clock[0] += 1
    assert metrics.unchanged(10.0)
    clock[0] += 9
    assert not metrics.unchanged(10.0)  # written again now and then, so readers see it is alive
    snapshot = metrics.snapshot()
    assert snapshot["delivered"] == 1 and snapshot["recentAttempts"]["codes2xx"] == 1
    clock[0] += metrics_module.RECENT_WINDOW_S
    assert not metrics.unchanged(1000.0)  # its recent attempt grew too old


def test_per_second_figures_after_unchanged_seconds_count_from_the_last_of_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(metrics_module.time, "monotonic", lambda: clock[0])
    metrics = SubscriptionMetrics("g.t", "s")
    metrics.snapshot()
    for _ in range(5):
        clock[0] += 1
        assert metrics.unchanged(10.0)
    clock[0] += 1
    metrics.count("parked", 3)
    snapshot = metrics.snapshot()
    assert snapshot["parkedPerSecond"] == 3 and snapshot["parked"] == 3 and snapshot["deliveredPerSecond"] == 0
    assert "unparked" not in snapshot  # parking's counters appear once counted


def test_at_rest_says_unchanged_without_the_gauges_and_wakes_on_what_moves_without_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``at_rest`` is asked instead of ``unchanged`` while the gauges' sources did not move: it must still see what
    changes without them (counts, recent attempts ageing, parked messages, the snapshot's age)."""
    clock = [1000.0]
    monkeypatch.setattr(metrics_module.time, "monotonic", lambda: clock[0])
    metrics = SubscriptionMetrics("g.t", "s")
    assert not metrics.at_rest(10.0)  # never snapshotted
    metrics.response(200, timed_out=False)
    metrics.snapshot()
    clock[0] += 1
    assert not metrics.at_rest(10.0)  # its per-second figures fall to zero: said once
    metrics.snapshot()
    for _ in range(3):
        clock[0] += 1
        assert metrics.at_rest(10.0)
    clock[0] += 1
    metrics.count("delivered", 2)
    assert not metrics.at_rest(10.0)
    assert metrics.snapshot()["deliveredPerSecond"] == 2  # counted from the last rest, a second ago
    clock[0] += 1
    metrics.snapshot()
    clock[0] += 1
    metrics.parked(4)  # from the parking lot's thread
    assert not metrics.at_rest(10.0)
    metrics.snapshot()
    clock[0] += 10
    assert not metrics.at_rest(10.0)  # written again now and then
    metrics.snapshot()
    clock[0] += metrics_module.RECENT_WINDOW_S - 9
    assert not metrics.at_rest(1000.0)  # its recent attempt grew too old
    assert sum(metrics.snapshot()["recentAttempts"].values()) == 0

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

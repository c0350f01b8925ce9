"""The circuit breaker's state machine on a clock the test moves, and its setting's JSON."""

from __future__ import annotations

import pytest

from hermes.consumers.breaker import BreakerState, CircuitBreaker
from hermes.domain import api_json
from hermes.domain.names import TopicName
from hermes.domain.subscription import CircuitBreakerPolicy
from hermes.errors import ValidationError

pytestmark = pytest.mark.unit
TOPIC = TopicName.parse("group.topic")
CLOSED, OPEN, HALF_OPEN = BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _breaker(**policy: int | float | None) -> tuple[CircuitBreaker, Clock, list[tuple[str, str]]]:
    clock, changes = Clock(), []
    breaker = CircuitBreaker(
        CircuitBreakerPolicy(**policy),  # type: ignore[arg-type]
        lambda state, previous, reason: changes.append((previous.value, state.value)),
        clock,
    )
    return breaker, clock, changes


def test_consecutive_failures_open_it_and_a_success_in_between_starts_the_count_again() -> None:
    breaker, _, changes = _breaker(consecutive_failures=3, minimum_requests=1000)
    for failed in (True, True, False, True, True):
        breaker.record(failed)
    assert breaker.closed and breaker.admit() is None
    breaker.record(True)
    assert breaker.state is OPEN and breaker.opened == 1 and "3 attempts in a row" in breaker.reason
    assert changes == [("CLOSED", "OPEN")]


def test_the_failure_ratio_opens_it_only_with_the_minimum_of_attempts_in_the_window() -> None:
    breaker, clock, _ = _breaker(consecutive_failures=1000, failure_ratio=0.5, window=10_000, minimum_requests=10)
    for i in range(9):
        breaker.record(failed=i % 2 == 0)  # 5 of 9 failed: too few attempts
    assert breaker.closed
    clock.now += 11  # those left the window
    for i in range(9):
        breaker.record(failed=i % 3 == 0)  # 3 of 9
    assert breaker.closed
    breaker.record(True)  # 4 of 10: below the ratio
    breaker.record(True)  # 5 of 11
    assert breaker.closed
    breaker.record(True)  # 6 of 12
    assert breaker.state is OPEN and "6 of the 12 attempts" in breaker.reason


def test_open_it_lets_one_probe_through_per_interval_a_failed_probe_opens_it_a_success_closes_it() -> None:
    breaker, clock, changes = _breaker(consecutive_failures=1, probe_interval=5000)
    breaker.record(True)
    assert breaker.admit() == pytest.approx(5.0)
    clock.now += 5
    assert breaker.admit() is None and breaker.state is HALF_OPEN  # the probe
    assert breaker.admit() == pytest.approx(5.0)  # nobody else meanwhile
    breaker.record(True)
    assert breaker.state is OPEN and breaker.opened == 1  # opened again, not counted as a new opening
    clock.now += 5
    assert breaker.admit() is None
    breaker.record(False)
    assert breaker.closed and breaker.admit() is None
    assert changes == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "OPEN"), ("OPEN", "HALF_OPEN"),
                       ("HALF_OPEN", "CLOSED")]  # fmt: skip


def test_after_closing_it_counts_from_zero() -> None:
    breaker, clock, _ = _breaker(consecutive_failures=2)
    breaker.record(True)
    breaker.record(True)
    clock.now += 5
    breaker.admit()
    breaker.record(False)
    breaker.record(True)
    assert breaker.closed


def test_without_a_policy_it_never_opens_and_turning_it_off_closes_it() -> None:
    breaker = CircuitBreaker(None)
    for _ in range(100):
        breaker.record(True)
    assert breaker.closed and breaker.admit() is None
    on, _, changes = _breaker(consecutive_failures=1)
    on.record(True)
    on.set_policy(None)
    assert on.closed and on.admit() is None and changes[-1] == ("OPEN", "CLOSED")


def test_a_new_endpoint_resets_it() -> None:
    breaker, _, _ = _breaker(consecutive_failures=2)
    breaker.record(True)
    breaker.reset("the endpoint changed")
    breaker.record(True)
    assert breaker.closed
    breaker.record(True)
    breaker.reset("the endpoint changed")
    assert breaker.closed and breaker.reason == "the endpoint changed"


def test_suspension_is_due_after_suspend_after_of_not_being_closed() -> None:
    breaker, clock, _ = _breaker(consecutive_failures=1, probe_interval=1000, suspend_after=10_000)
    assert not breaker.suspension_due()
    breaker.record(True)
    clock.now += 5
    breaker.admit()  # half-open counts as open
    assert not breaker.suspension_due()
    clock.now += 5
    assert breaker.suspension_due()
    clock.now += 1
    breaker.admit()
    breaker.record(False)
    assert not breaker.suspension_due()
    never, clock, _ = _breaker(consecutive_failures=1)
    never.record(True)
    clock.now += 10**9
    assert not never.suspension_due()


def test_the_setting_is_answered_only_when_set_and_read_back_with_its_defaults() -> None:
    plain = api_json.subscription_from_json({"name": "s", "endpoint": "http://h/"}, TOPIC)
    assert plain.circuit_breaker is None and "circuitBreaker" not in api_json.subscription_to_json(plain)
    nulled = api_json.subscription_from_json({"name": "s", "endpoint": "http://h/", "circuitBreaker": None}, TOPIC)
    assert nulled.circuit_breaker is None
    sub = api_json.subscription_from_json(
        {"name": "s", "endpoint": "http://h/", "circuitBreaker": {"consecutiveFailures": 5, "suspendAfter": 60000}},
        TOPIC,
    )
    assert sub.circuit_breaker == CircuitBreakerPolicy(consecutive_failures=5, suspend_after=60000)
    answered = api_json.subscription_to_json(sub)["circuitBreaker"]
    assert answered == {
        "consecutiveFailures": 5,
        "failureRatio": 0.5,
        "window": 60000,
        "minimumRequests": 20,
        "probeInterval": 5000,
        "suspendAfter": 60000,
    }
    assert api_json.subscription_from_json(api_json.subscription_to_json(sub), TOPIC) == sub
    default = api_json.subscription_from_json({"name": "s", "endpoint": "http://h/", "circuitBreaker": {}}, TOPIC)
    assert "suspendAfter" not in api_json.subscription_to_json(default)["circuitBreaker"]


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("on", "circuitBreaker"),
        ({"consecutiveFailures": 0}, "circuitBreaker.consecutiveFailures"),
        ({"failureRatio": 1.5}, "circuitBreaker.failureRatio"),
        ({"failureRatio": "half"}, "circuitBreaker.failureRatio"),
        ({"window": 10}, "circuitBreaker.window"),
        ({"minimumRequests": -1}, "circuitBreaker.minimumRequests"),
        ({"probeInterval": 0}, "circuitBreaker.probeInterval"),
        ({"suspendAfter": 5}, "circuitBreaker.suspendAfter"),
        ({"suspendAfter": 10**13}, "circuitBreaker.suspendAfter"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_field(setting: object, field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        api_json.subscription_from_json({"name": "s", "endpoint": "http://h/", "circuitBreaker": setting}, TOPIC)
    assert refused.value.field == field and refused.value.message.startswith(f"{field}: ")

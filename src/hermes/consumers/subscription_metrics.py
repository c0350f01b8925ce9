"""Per-subscription delivery metrics: lifetime counters kept in memory, snapshotted to the metadata
repository (so the management API can aggregate every node and totals survive restarts) and exported to
Prometheus."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter, Gauge

from hermes.domain.retry_rules import RETRIES_STOPPED, RuleAction
from hermes.metadata.documents import ATTEMPT_OUTCOMES, COUNTERS

_LABELS = ("topic", "subscription")
_DELIVERED = Counter("hermes_consumers_delivered", "Messages delivered", _LABELS)
_DISCARDED = Counter("hermes_consumers_discarded", "Messages discarded after their inflight TTL", _LABELS)
_DEAD_LETTERED = Counter(
    "hermes_consumers_dead_lettered", "Discarded messages written to the subscription's dead-letter topic", _LABELS
)
_REDRIVEN = Counter("hermes_consumers_redriven", "Dead letters a redrive delivered again", _LABELS)
_FILTERED = Counter("hermes_consumers_filtered", "Messages skipped by filters", _LABELS)
_RESPONSES = Counter("hermes_consumers_responses", "Delivery attempts by outcome", (*_LABELS, "outcome"))
_INFLIGHT = Gauge("hermes_consumers_inflight", "Messages read and not finished", _LABELS)
_RATE = Gauge("hermes_consumers_rate", "Current sending rate limit (messages/s)", _LABELS)
_RULE_ACTIONS = Counter(
    "hermes_consumers_status_rule_actions", "Messages of answers a status rule decided, by action", (*_LABELS, "action")
)
_RETRIES_STOPPED = Counter(
    "hermes_consumers_retries_stopped", "Messages whose retries the subscriber's stop-retry header ended", _LABELS
)
_RULE_ACTION_BY_COUNTER = {action.counter: action.value for action in RuleAction}
_TOKEN_REQUESTS = Counter("hermes_consumers_oauth_token_requests", "OAuth token requests sent", _LABELS)
_TOKEN_FAILURES = Counter("hermes_consumers_oauth_token_failures", "OAuth tokens needed but not obtained", _LABELS)
_MODE = Gauge("hermes_consumers_rate_mode", "Rate mode: 0 normal, 1 slow, 2 heartbeat", _LABELS)
_BREAKER = Gauge(
    "hermes_consumers_circuit_breaker_state", "Circuit breaker: 0 closed (or none), 1 open, 2 half-open", _LABELS
)
_BREAKER_OPENED = Counter("hermes_consumers_circuit_breaker_opened", "Times the circuit breaker opened", _LABELS)
_BREAKER_STATES = {"CLOSED": 0, "OPEN": 1, "HALF_OPEN": 2}
_LAG = Gauge("hermes_consumers_lag", "Messages after the committed offsets of this node's partitions", _LABELS)
_PARKED = Counter("hermes_consumers_parked", "Messages parked in the retry topic", _LABELS)
_UNPARKED = Counter("hermes_consumers_unparked", "Parked messages taken back for delivery", _LABELS)
_PARKED_NOW = Gauge("hermes_consumers_parked_now", "Messages in the retry topic not finished yet", _LABELS)
# Counters of retryParking (our extension): in a snapshot once counted, so Hermes' metrics shape is unchanged
PARKING_COUNTERS = ("parked", "unparked")
# The Prometheus counter of each counted name with one of its own (the others are outcomes of responses)
_COUNTERS = {
    "delivered": _DELIVERED,
    "discarded": _DISCARDED,
    "filtered": _FILTERED,
    RETRIES_STOPPED: _RETRIES_STOPPED,
    "parked": _PARKED,
    "unparked": _UNPARKED,
    "deadLettered": _DEAD_LETTERED,
    "redriven": _REDRIVEN,
}

# Health looks at the last attempts rather than the last second: a failing subscription is slowed down to one
# attempt a second, then a minute, and must not look healthy in the seconds between its attempts.
RECENT_ATTEMPTS = 100
RECENT_WINDOW_S = 300.0
# A snapshot's per-second figure of each counter, and their values in a second with nothing counted
_RATE_KEYS = {name: f"{name}PerSecond" for name in (*COUNTERS, *PARKING_COUNTERS)}
_ZERO_RATES = {_RATE_KEYS[name]: 0.0 for name in COUNTERS}
_MODES = {"NORMAL": 0, "SLOW": 1, "HEARTBEAT": 2}


def _rate_key(name: str) -> str:
    return _RATE_KEYS.get(name) or _RATE_KEYS.setdefault(name, f"{name}PerSecond")


@dataclass
class SubscriptionMetrics:
    topic: str
    subscription: str
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    inflight: int = 0
    rate: float = 0.0
    mode: str = "NORMAL"
    lag: int = 0
    breaker: dict[str, Any] | None = None  # the circuit breaker's state, when the subscription has one
    parked_now: int | None = None  # with parked messages only
    # Counted since the previous snapshot (its per-second figures), kept as counted rather than by copying the
    # totals at each snapshot: a thousand subscriptions' snapshots every second were most of what they allocated
    _interval: dict[str, int] = field(default_factory=dict)
    _previous_at: float = field(default_factory=time.monotonic)
    _snapshot_at: float = 0.0
    _snapshot_rates: bool = False  # the last snapshot had a per-second figure above zero
    _snapshot_gauges: tuple[object, ...] = ()  # and these gauges
    _children: dict[str, Any] = field(default_factory=dict)  # Prometheus children by counter name
    _recent: deque[tuple[float, str]] = field(default_factory=deque)  # the last attempts: when, and their outcome
    _recent_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ATTEMPT_OUTCOMES, 0))

    @property
    def key(self) -> str:
        return f"{self.topic}${self.subscription}"

    def _labels(self) -> dict[str, str]:
        return {"topic": self.topic, "subscription": self.subscription}

    def restore(self, snapshot: dict[str, Any] | None) -> None:
        """Continues the lifetime totals of an earlier run of this node."""
        if snapshot:
            for name in COUNTERS:
                self.totals[name] = int(snapshot.get(name, 0))
            for name in PARKING_COUNTERS:
                if name in snapshot:
                    self.totals[name] = int(snapshot[name])

    def count(self, name: str, amount: int = 1) -> None:
        """Counts in plain numbers; Prometheus has them with the next snapshot (its counters' ``inc``, a lock and
        a few calls each, was a twentieth of a delivery's CPU)."""
        self.totals[name] = self.totals.get(name, 0) + amount
        self._interval[name] = self._interval.get(name, 0) + amount

    def _counter(self, name: str) -> Any:
        """The Prometheus counter of a counted name, for this subscription."""
        child = self._children.get(name)
        if child is None:  # looking a child up by labels costs more than the increment: once per name
            labels = self._labels()
            counter = _COUNTERS.get(name)
            if counter is not None:
                child = counter.labels(**labels)
            elif name in _RULE_ACTION_BY_COUNTER:
                child = _RULE_ACTIONS.labels(**labels, action=_RULE_ACTION_BY_COUNTER[name])
            else:
                child = _RESPONSES.labels(**labels, outcome=name)
            self._children[name] = child
        return child

    def response(self, status: int | None, timed_out: bool) -> None:
        if timed_out:
            outcome = "timeouts"
        elif status is None:
            outcome = "otherErrors"
        elif 200 <= status < 300:
            outcome = "codes2xx"
        elif 400 <= status < 500:
            outcome = "codes4xx"
        elif status >= 500:
            outcome = "codes5xx"
        else:
            outcome = "otherErrors"
        self.count(outcome)
        recent = self._recent
        recent.append((time.monotonic(), outcome))
        self._recent_counts[outcome] += 1
        if len(recent) > RECENT_ATTEMPTS:
            self._recent_counts[recent.popleft()[1]] -= 1

    def _expire(self, now: float) -> bool:
        """Forgets the recent attempts older than the window: whether there were some."""
        recent, expired = self._recent, False
        while recent and now - recent[0][0] > RECENT_WINDOW_S:
            self._recent_counts[recent.popleft()[1]] -= 1
            expired = True
        return expired

    def gauges(self, inflight: int, rate: float, mode: str, lag: int) -> None:
        gauges = self._children.get("gauges")
        if gauges is None:  # looked up once: every subscription sets them every second
            labels = self._labels()
            gauges = self._children["gauges"] = (
                _INFLIGHT.labels(**labels),
                _RATE.labels(**labels),
                _MODE.labels(**labels),
                _LAG.labels(**labels),
            )
        elif (inflight, rate, mode, lag) == (self.inflight, self.rate, self.mode, self.lag):
            return  # an idle subscription's: each gauge's set takes a lock
        self.inflight, self.rate, self.mode, self.lag = inflight, rate, mode, lag
        gauges[0].set(inflight)
        gauges[1].set(rate)
        gauges[2].set(_MODES.get(mode, 0))
        gauges[3].set(lag)

    def circuit_breaker(self, state: str, opened: int, since: int, reason: str) -> None:
        """The breaker's state (``since``: epoch millis it left CLOSED, 0 when closed) and openings so far."""
        before = self.breaker["opened"] if self.breaker else 0
        self.breaker = {"state": state, "opened": opened, "since": since, "reason": reason}
        children = self._children.get("breaker")
        if children is None:  # looked up once, as the gauges
            labels = self._labels()
            children = self._children["breaker"] = (_BREAKER.labels(**labels), _BREAKER_OPENED.labels(**labels))
        children[0].set(_BREAKER_STATES[state])
        if opened > before:
            children[1].inc(opened - before)

    def parked(self, now: int) -> None:
        """Messages in the subscription's retry topic not finished yet."""
        self.parked_now = now
        _PARKED_NOW.labels(**self._labels()).set(now)

    def _gauges(self) -> tuple[object, ...]:
        return self.inflight, self.rate, self.mode, self.lag, self.breaker, self.parked_now

    def unchanged(self, within: float) -> bool:
        """Whether a snapshot now would say what the last one said, and that one is less than ``within`` seconds
        old: then none need be taken (an idle subscription's), and the next one's per-second figures count from
        now, as if this one had been taken. Checked without building a snapshot."""
        now = time.monotonic()
        return self._as_snapshotted(now, within, lambda: self._expire(now))

    def at_rest(self, within: float) -> bool:
        """``unchanged`` when the gauges' sources are known not to have moved since they were last set: nothing
        counted, no recent attempt to expire, the gauges as in the last snapshot, and that one recent. Expires
        nothing: a report that finds it not at rest snapshots what aged."""
        now = time.monotonic()
        recent = self._recent
        return self._as_snapshotted(now, within, lambda: bool(recent) and now - recent[0][0] > RECENT_WINDOW_S)

    def _as_snapshotted(self, now: float, within: float, aged: Callable[[], bool]) -> bool:
        """Whether nothing was counted, nothing ``aged``, and the last snapshot is under ``within`` seconds old with
        today's gauges; if so, the next per-second figures count from ``now``."""
        if (
            self._interval
            or self._snapshot_rates
            or aged()
            or now - self._snapshot_at >= within
            or self._gauges() != self._snapshot_gauges
        ):
            return False
        self._previous_at = now
        return True

    def snapshot(self) -> dict[str, Any]:
        """Totals, gauges and per-second rates since the previous snapshot; what was counted since then goes to
        Prometheus too, so that its counters say what the snapshots say."""
        now = time.monotonic()
        self._expire(now)
        elapsed = max(now - self._previous_at, 1e-6)
        totals, interval = self.totals, self._interval
        snapshot: dict[str, Any] = totals | _ZERO_RATES
        if len(totals) != len(COUNTERS):  # parking's counters, once counted
            for name in totals:
                snapshot.setdefault(_rate_key(name), 0.0)
        for name, amount in interval.items():
            snapshot[_rate_key(name)] = round(amount / elapsed, 3)
            self._counter(name).inc(amount)
        self._snapshot_rates = bool(interval)
        interval.clear()
        self._previous_at = self._snapshot_at = now
        self._snapshot_gauges = self._gauges()
        snapshot["recentAttempts"] = dict(self._recent_counts)
        snapshot["inflight"] = self.inflight
        snapshot["rate"] = self.rate
        snapshot["rateMode"] = self.mode
        snapshot["lag"] = self.lag
        if self.breaker is not None:
            snapshot["circuitBreaker"] = self.breaker
        if self.parked_now is not None:
            snapshot["parkedNow"] = self.parked_now
        snapshot["updatedAt"] = int(time.time() * 1000)
        return snapshot


def count_token_request(topic: str, subscription: str, *, failed: bool) -> None:
    (_TOKEN_FAILURES if failed else _TOKEN_REQUESTS).labels(topic=topic, subscription=subscription).inc()

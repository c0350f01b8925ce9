"""Per-subscription delivery metrics: lifetime counters kept in memory, snapshotted to the metadata
repository (so the management API can aggregate every node and totals survive restarts) and exported to
Prometheus."""

from __future__ import annotations

import time
from collections import deque
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
    _previous: dict[str, int] = field(default_factory=dict)
    _previous_at: float = field(default_factory=time.monotonic)
    _children: dict[str, Any] = field(default_factory=dict)  # Prometheus children by counter name
    _recent: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=RECENT_ATTEMPTS))

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
        self._previous = dict(self.totals)

    def count(self, name: str, amount: int = 1) -> None:
        self.totals[name] = self.totals.get(name, 0) + amount
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
        child.inc(amount)

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
        self._recent.append((time.monotonic(), outcome))

    def gauges(self, inflight: int, rate: float, mode: str, lag: int) -> None:
        self.inflight, self.rate, self.mode, self.lag = inflight, rate, mode, lag
        gauges = self._children.get("gauges")
        if gauges is None:  # looked up once: every subscription sets them every second
            labels = self._labels()
            gauges = self._children["gauges"] = (
                _INFLIGHT.labels(**labels),
                _RATE.labels(**labels),
                _MODE.labels(**labels),
                _LAG.labels(**labels),
            )
        gauges[0].set(inflight)
        gauges[1].set(rate)
        gauges[2].set({"NORMAL": 0, "SLOW": 1, "HEARTBEAT": 2}.get(mode, 0))
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

    def snapshot(self) -> dict[str, Any]:
        """Totals, gauges and per-second rates since the previous snapshot."""
        now = time.monotonic()
        elapsed = max(now - self._previous_at, 1e-6)
        per_second = {
            f"{k}PerSecond": round((v - self._previous.get(k, 0)) / elapsed, 3) for k, v in self.totals.items()
        }
        self._previous, self._previous_at = dict(self.totals), now
        recent = dict.fromkeys(ATTEMPT_OUTCOMES, 0)
        for at, outcome in self._recent:
            if now - at <= RECENT_WINDOW_S:
                recent[outcome] += 1
        return {
            **self.totals,
            **per_second,
            "recentAttempts": recent,
            "inflight": self.inflight,
            "rate": self.rate,
            "rateMode": self.mode,
            "lag": self.lag,
            **({"circuitBreaker": self.breaker} if self.breaker is not None else {}),
            **({} if self.parked_now is None else {"parkedNow": self.parked_now}),
            "updatedAt": int(time.time() * 1000),
        }


def count_token_request(topic: str, subscription: str, *, failed: bool) -> None:
    (_TOKEN_FAILURES if failed else _TOKEN_REQUESTS).labels(topic=topic, subscription=subscription).inc()

"""A subscription's rate limit split across the nodes that deliver it: the shares never add up to more."""

from __future__ import annotations

import pytest

from hermes.cluster.rates import split_rate

pytestmark = pytest.mark.unit


def test_new_nodes_get_equal_shares_and_one_node_the_whole_limit() -> None:
    assert split_rate(100, ["a", "b"], {}, {}) == {"a": 50.0, "b": 50.0}
    assert split_rate(100, ["a"], {}, {"a": 50.0}) == {"a": 100.0}
    assert split_rate(100, ["a", "b", "c"], {}, {"a": 50.0, "b": 50.0}) == {"a": 33.33, "b": 33.33, "c": 33.33}


def test_a_busy_node_gets_what_an_idle_one_does_not_use() -> None:
    shares = split_rate(100, ["a", "b"], {"a": 50.0, "b": 5.0}, {"a": 50.0, "b": 50.0})
    assert shares == {"a": 92.5, "b": 7.5}  # b keeps half again its use


def test_shares_follow_use_and_come_back_when_all_are_busy() -> None:
    shares = {"a": 50.0, "b": 50.0}
    for _ in range(3):  # b idle: a takes most of the limit
        shares = split_rate(100, ["a", "b"], {"a": shares["a"], "b": 0.0}, shares)
        assert sum(shares.values()) <= 100
    assert shares["a"] >= 94 and shares["b"] == 5.0  # b keeps a floor for traffic that comes back
    for _ in range(8):  # both busy: they drift back to equal shares
        shares = split_rate(100, ["a", "b"], dict(shares), shares)
        assert sum(shares.values()) <= 100
    assert abs(shares["a"] - 50) < 1 and abs(shares["b"] - 50) < 1


def test_the_sum_never_exceeds_the_limit() -> None:
    shares = {"a": 1.0, "b": 1.0, "c": 1.0}
    for use in ({"a": 3.0}, {"b": 0.2, "c": 0.1}, {"a": 0.0, "b": 9.0, "c": 9.0}, {}):
        shares = split_rate(3, ["a", "b", "c"], use, shares)
        assert sum(shares.values()) <= 3 + 1e-9 and all(s > 0 for s in shares.values())


def test_nobody_busy_keeps_the_shares() -> None:
    assert split_rate(10, ["a", "b"], {"a": 1.0, "b": 1.0}, {"a": 6.0, "b": 4.0}) == {"a": 6.0, "b": 4.0}

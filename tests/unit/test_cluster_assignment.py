"""The coordinator's assignment of subscriptions to consumer nodes: pure functions of the cluster's state."""

from __future__ import annotations

import pytest

from hermes.cluster.assignment import (
    Assignment,
    Limits,
    Rebalancing,
    Standby,
    assign,
    choose_move,
    finish_moves,
    start_move,
    wanted_consumers,
)

pytestmark = pytest.mark.unit

A, B, C = "g.t$a", "g.t$b", "g.u$c"


def test_each_subscription_gets_two_distinct_nodes_least_loaded_first() -> None:
    loads = {"n1": 0.9, "n2": 0.1, "n3": 0.2}
    result = assign({A: 2}, loads, Assignment(), Limits())
    assert result.subscriptions == {A: ("n2", "n3")}


def test_never_twice_on_one_node_and_capped_by_the_number_of_nodes() -> None:
    result = assign({A: 3}, {"n1": 0.0, "n2": 0.0}, Assignment(), Limits())
    assert sorted(result.subscriptions[A]) == ["n1", "n2"]


def test_new_subscriptions_spread_over_idle_nodes() -> None:
    names = {f"g.t$s{i}": 1 for i in range(6)}
    result = assign(names, {"n1": 0.0, "n2": 0.0, "n3": 0.0}, Assignment(), Limits())
    per_node = {n: len(result.of_node(n)) for n in ("n1", "n2", "n3")}
    assert per_node == {"n1": 2, "n2": 2, "n3": 2}


def test_max_subscriptions_per_node_leaves_slots_empty_rather_than_overfill() -> None:
    result = assign({A: 2, B: 2, C: 2}, {"n1": 0.0, "n2": 0.0}, Assignment(), Limits(max_per_node=2))
    assert all(len(result.of_node(n)) == 2 for n in ("n1", "n2"))
    assert sum(len(nodes) for nodes in result.subscriptions.values()) == 4


def test_a_node_over_a_lowered_limit_sheds_subscriptions() -> None:
    current = Assignment({A: ("n1",), B: ("n1",), C: ("n1",)})
    result = assign({A: 1, B: 1, C: 1}, {"n1": 0.5, "n2": 0.0}, current, Limits(max_per_node=2))
    assert len(result.of_node("n1")) == 2 and len(result.of_node("n2")) == 1


def test_minimal_moves_a_joining_node_takes_one_slot_of_a_node_two_ahead() -> None:
    current = assign({A: 2, B: 2}, {"n1": 0.3, "n2": 0.3}, Assignment(), Limits())
    result = assign({A: 2, B: 2}, {"n1": 0.3, "n2": 0.3, "n3": 0.0}, current, Limits())
    assert result.subscriptions == {A: ("n3", "n2"), B: ("n1", "n2")}


def test_a_dead_nodes_slots_go_to_the_survivors_and_nothing_else_moves() -> None:
    current = Assignment({A: ("n1", "n2"), B: ("n2", "n3"), C: ("n3", "n1")})
    result = assign({A: 2, B: 2, C: 2}, {"n2": 0.2, "n3": 0.2, "n4": 0.0}, current, Limits())
    assert result.subscriptions == {A: ("n2", "n4"), B: ("n2", "n3"), C: ("n3", "n4")}


def test_a_lowered_wanted_number_drops_the_most_loaded_assignee() -> None:
    current = Assignment({A: ("n1", "n2")})
    result = assign({A: 1}, {"n1": 0.9, "n2": 0.1}, current, Limits())
    assert result.subscriptions == {A: ("n2",)}


def test_inactive_subscriptions_lose_their_nodes() -> None:
    current = Assignment({A: ("n1",), B: ("n1",)})
    assert assign({A: 1}, {"n1": 0.0}, current, Limits()).subscriptions == {A: ("n1",)}


def test_workload_constraints_override_the_default() -> None:
    constraints = {f"subscription:{A}": {"consumersNumber": 3}, "topic:g.t": {"consumersNumber": 1}}
    assert wanted_consumers([A, B, C], constraints, 2) == {A: 3, B: 1, C: 2}


def test_a_subscription_on_one_node_gets_staggered_standbys() -> None:
    result = assign({A: 1}, {"n1": 0.0, "n2": 0.5, "n3": 0.1}, Assignment(), Limits(standbys=2))
    assert result.subscriptions == {A: ("n1",)}
    assert result.standbys == {A: ("n3", "n2")}


def test_standbys_take_over_after_staggered_timeouts_unless_reassigned() -> None:
    assignment = Assignment({A: ("n1",)}, {A: ("n3", "n2")})
    first, second, other = Standby("n3", 5.0), Standby("n2", 5.0), Standby("n4", 5.0)
    alive = frozenset({"n1", "n2", "n3"})
    assert not first.taken_over(assignment, alive, 0.0)
    gone = frozenset({"n2", "n3", "n4"})  # n1 left at t=10
    for standby in (first, second, other):
        assert not standby.taken_over(assignment, gone, 10.0)
    assert first.taken_over(assignment, gone, 14.9) == frozenset()
    assert first.taken_over(assignment, gone, 15.0) == {A}
    assert second.taken_over(assignment, gone, 15.0) == frozenset()
    assert second.taken_over(assignment, gone, 20.0) == {A}
    assert other.taken_over(assignment, gone, 100.0) == frozenset()  # no standby of it
    reassigned = Assignment({A: ("n3",)}, {A: ("n2",)})
    assert first.taken_over(reassigned, gone, 21.0) == frozenset()  # n3 runs it as its assignee now
    assert second.taken_over(reassigned, gone, 21.0) == frozenset()
    assert second.taken_over(assignment, gone, 22.0) == frozenset()  # the clock started again


def test_the_first_standby_replaces_a_dead_single_node() -> None:
    current = Assignment({A: ("n1",)}, {A: ("n3", "n2")})
    result = assign({A: 1}, {"n2": 0.0, "n3": 0.4}, current, Limits())
    assert result.subscriptions == {A: ("n3",)}  # it may run the subscription already, having taken it over
    assert result.standbys == {A: ("n2",)}


def test_rebalancing_moves_the_heaviest_subscription_of_an_overloaded_node_to_an_idle_one() -> None:
    current = Assignment({A: ("n1",), B: ("n1",)})
    loads = {"n1": 0.95, "n2": 0.1}
    move = choose_move(current, loads, {"n1": {A: 10.0, B: 500.0}}, Rebalancing(high=0.8, low=0.5))
    assert move == (B, "n1", "n2")


def test_no_move_inside_the_hysteresis_band_or_during_another_move() -> None:
    current = Assignment({A: ("n1",)})
    policy = Rebalancing(high=0.8, low=0.5)
    assert choose_move(current, {"n1": 0.79, "n2": 0.0}, {}, policy) is None  # not overloaded
    assert choose_move(current, {"n1": 0.95, "n2": 0.6}, {}, policy) is None  # nobody idle enough
    moving = start_move(current, A, "n1", "n2")
    assert choose_move(moving, {"n1": 0.95, "n2": 0.0, "n3": 0.0}, {}, policy) is None


def test_a_move_adds_the_new_node_before_removing_the_old() -> None:
    moving = start_move(Assignment({A: ("n1",)}), A, "n1", "n2")
    assert moving.subscriptions == {A: ("n1", "n2")}
    assert assign({A: 1}, {"n1": 0.9, "n2": 0.0}, moving, Limits()).subscriptions == {A: ("n1", "n2")}
    assert finish_moves(moving, {"n2": frozenset()}) == moving  # not running on n2 yet
    done = finish_moves(moving, {"n2": frozenset({A})})
    assert done.subscriptions == {A: ("n2",)} and not done.moves


def test_the_document_round_trips() -> None:
    original = start_move(assign({A: 1, B: 2}, {"n1": 0.0, "n2": 0.1}, Assignment(), Limits()), A, "n1", "n2")
    assert Assignment.from_document(original.to_document()) == original


def _per_node(assignment: Assignment, nodes: tuple[str, ...]) -> list[int]:
    return sorted(len(assignment.of_node(n)) for n in nodes)


def test_nodes_joining_one_by_one_get_even_shares_of_the_slots() -> None:
    """Issue 33: three nodes started, four subscriptions of two nodes each (8 slots): the first node's round saw
    it alone, the next round two nodes, and the third node got none of the 8 slots while the others held 4."""
    wanted = {f"g.t$s{i}": 2 for i in range(4)}
    assignment = Assignment()
    for members in (("n1",), ("n1", "n2"), ("n1", "n2", "n3")):
        assignment = assign(wanted, dict.fromkeys(members, 0.0), assignment, Limits())
    assert _per_node(assignment, ("n1", "n2", "n3")) == [2, 3, 3]
    assert all(len(set(nodes)) == 2 for nodes in assignment.subscriptions.values())
    again = assign(wanted, dict.fromkeys(("n1", "n2", "n3"), 0.0), assignment, Limits())
    assert again == assignment  # even already: the next round moves nothing


def test_a_restarted_node_gets_its_share_back() -> None:
    wanted = {f"g.t$s{i}": 1 for i in range(8)}
    three = dict.fromkeys(("n1", "n2", "n3"), 0.0)
    assignment = assign(wanted, three, Assignment(), Limits())
    assert _per_node(assignment, tuple(three)) == [2, 3, 3]
    without = assign(wanted, {"n1": 0.0, "n2": 0.0}, assignment, Limits())  # n3 restarts: it left...
    assert _per_node(without, ("n1", "n2")) == [4, 4]
    back = assign(wanted, three, without, Limits())  # ...and came back
    assert _per_node(back, tuple(three)) == [2, 3, 3]
    kept = sum(len(set(back.subscriptions[s]) & set(without.subscriptions[s])) for s in wanted)
    assert kept == 6  # only the two slots n3 takes moved


def test_evening_out_leaves_a_move_by_load_alone() -> None:
    moving = start_move(Assignment({A: ("n1",), B: ("n1",), C: ("n1",)}), A, "n1", "n2")
    result = assign({A: 1, B: 1, C: 1}, {"n1": 0.9, "n2": 0.0, "n3": 0.0}, moving, Limits())
    assert result.subscriptions[A] == ("n1", "n2") and result.moves == moving.moves
    assert _per_node(result, ("n1", "n2", "n3")) == [1, 1, 2]  # n1 keeps B or C, the other went to n3


def test_evening_out_counts_idle_nodes_as_equally_loaded_and_fills_no_busy_one() -> None:
    wanted = {f"g.t$s{i}": 1 for i in range(4)}
    current = assign(wanted, {"n1": 0.0, "n2": 0.0}, Assignment(), Limits())
    joined = assign(wanted, {"n1": 0.001, "n2": 0.0, "n3": 0.05}, current, Limits())  # n3 still starting up
    assert _per_node(joined, ("n1", "n2", "n3")) == [1, 1, 2]
    busy = assign(wanted, {"n1": 0.1, "n2": 0.1, "n3": 0.9}, current, Limits())
    assert _per_node(busy, ("n1", "n2", "n3")) == [0, 2, 2]

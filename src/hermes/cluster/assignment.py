"""Which consumer nodes run which subscriptions: pure functions of the cluster's state, decided by the
coordinator (coordinator.py) and written to ZooKeeper.

Every active subscription gets ``consumers`` nodes (``consumersPerSubscription``, or its workload constraint),
never two on one node, at most ``max_per_node`` subscriptions on a node, the least-loaded nodes first. A new
assignment starts from the current one and changes only what it must (minimal moves): an assignee stays while
it lives, a subscription loses assignees only when it has more than it needs, a missing one goes to the
least-loaded node that does not run it yet, and a node holding two slots more than a node no more loaded
hands one over (nodes joining one by one, or coming back, get their share). A subscription on one node gets
``standbys`` (the next least-loaded nodes, in order): each takes over on its own, after a timeout staggered by
its place in the list, when every assignee has gone and no coordinator has reassigned it (node.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A node that reports no use at all still costs something per subscription it runs: without this floor an idle
# cluster would pile every new subscription onto the same node.
MIN_SUBSCRIPTION_COST = 0.01
# Cores of CPU load by which nodes count as equally loaded when slots are evened out: idle nodes report a few
# thousandths apart, and a node just started reports its start-up for a while.
LOAD_NOISE = 0.1


@dataclass(frozen=True)
class Limits:
    consumers_per_subscription: int = 2
    max_per_node: int = 200
    standbys: int = 2


@dataclass(frozen=True)
class Assignment:
    """``subscriptions``: qualified subscription name -> its assignees (in the order they were assigned);
    ``standbys``: for a subscription on one node, the nodes that take over after staggered timeouts;
    ``moves``: a move by load in progress, subscription -> (from, to): both run it until ``to`` reports running;
    ``rates``: each node's share of a subscription's rate limit (rates.py), subscription -> node -> messages/s."""

    subscriptions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    standbys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    moves: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    rates: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def of_node(self, node: str) -> frozenset[str]:
        return frozenset(s for s, nodes in self.subscriptions.items() if node in nodes)

    def to_document(self) -> dict[str, object]:
        return {
            "subscriptions": {s: list(n) for s, n in sorted(self.subscriptions.items())},
            "standbys": {s: list(n) for s, n in sorted(self.standbys.items())},
            "moves": {s: {"from": f, "to": t} for s, (f, t) in sorted(self.moves.items())},
            "rates": {s: dict(sorted(r.items())) for s, r in sorted(self.rates.items())},
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any] | None) -> Assignment:
        document = document or {}
        return cls(
            {s: tuple(n) for s, n in document.get("subscriptions", {}).items()},
            {s: tuple(n) for s, n in document.get("standbys", {}).items()},
            {s: (m["from"], m["to"]) for s, m in document.get("moves", {}).items()},
            {s: {n: float(r) for n, r in shares.items()} for s, shares in document.get("rates", {}).items()},
        )

    def with_rates(self, rates: Mapping[str, Mapping[str, float]]) -> Assignment:
        return dataclasses.replace(self, rates=rates)


def wanted_consumers(
    subscriptions: Iterable[str], constraints: Mapping[str, Mapping[str, object]], default: int
) -> dict[str, int]:
    """How many nodes each subscription wants: its own workload constraint, else its topic's, else ``default``.
    ``constraints`` are the documents management stores, keyed ``subscription:{name}`` and ``topic:{name}``."""
    wanted = {}
    for name in subscriptions:
        topic = name.rpartition("$")[0]
        document = constraints.get(f"subscription:{name}") or constraints.get(f"topic:{topic}") or {}
        number = document.get("consumersNumber", default)
        wanted[name] = max(1, int(number)) if isinstance(number, int) else default
    return wanted


class _Loads:
    """Each node's projected load while an assignment is being made: its reported load plus an estimated cost for
    every subscription given to it (or minus, taken from it) in this round."""

    def __init__(self, loads: Mapping[str, float], current: Mapping[str, tuple[str, ...]]) -> None:
        self.load = dict(loads)
        self.count = dict.fromkeys(loads, 0)
        for nodes in current.values():
            for node in nodes:
                if node in self.count:
                    self.count[node] += 1
        slots = sum(self.count.values())
        self.cost = max(MIN_SUBSCRIPTION_COST, sum(self.load.values()) / slots if slots else 0.0)

    def add(self, node: str) -> None:
        self.load[node] += self.cost
        self.count[node] += 1

    def remove(self, node: str) -> None:
        self.load[node] -= self.cost
        self.count[node] -= 1

    def order(self, nodes: Iterable[str]) -> list[str]:
        return sorted(nodes, key=lambda n: (self.load[n], self.count[n], n))


def assign(wanted: Mapping[str, int], loads: Mapping[str, float], current: Assignment, limits: Limits) -> Assignment:
    """The new assignment of the subscriptions in ``wanted`` (name -> nodes wanted) over the live nodes of
    ``loads`` (node -> load), changing ``current`` as little as it can. Slots no node can take (every node full
    or already running the subscription) stay empty until a node joins or frees a place."""
    kept = {name: tuple(n for n in current.subscriptions.get(name, ()) if n in loads) for name in sorted(wanted)}
    projected = _Loads(loads, kept)
    moves = {s: m for s, m in current.moves.items() if s in kept and all(n in kept[s] for n in m)}
    for name, assignees in list(kept.items()):  # too many assignees (the wanted number fell): drop the most loaded
        extra = len(assignees) - wanted[name] - (1 if name in moves else 0)
        dropped = reversed(projected.order(assignees))
        for node in list(dropped)[: max(0, extra)]:
            kept[name] = tuple(n for n in kept[name] if n != node)
            projected.remove(node)
    for node in loads:  # a node over the limit (it fell) sheds the subscriptions that have most assignees
        over = projected.count[node] - limits.max_per_node
        for name in sorted((s for s in kept if node in kept[s]), key=lambda s: (-len(kept[s]), s))[: max(0, over)]:
            kept[name] = tuple(n for n in kept[name] if n != node)
            projected.remove(node)
            moves.pop(name, None)
    for name in sorted(kept, key=lambda s: (len(kept[s]) - wanted[s], s)):  # the emptiest first
        nodes = kept[name]
        preferred = [n for n in current.standbys.get(name, ()) if n in loads]  # a standby may run it already
        for _ in range(wanted[name] - len(nodes)):
            free = [n for n in loads if n not in nodes and projected.count[n] < limits.max_per_node]
            if not free:
                break
            node = next((n for n in preferred if n in free), None) or projected.order(free)[0]
            nodes = (*nodes, node)
            projected.add(node)
        kept[name] = nodes
    _even_out(kept, moves, loads, projected)
    standbys = {}
    for name, nodes in kept.items():
        if len(nodes) == 1 and limits.standbys:
            others = [n for n in current.standbys.get(name, ()) if n in loads and n not in nodes]
            for node in projected.order(n for n in loads if n not in nodes and n not in others):
                others.append(node)
            if others[: limits.standbys]:
                standbys[name] = tuple(others[: limits.standbys])
    return Assignment({s: n for s, n in kept.items() if n}, standbys, moves, current.rates)


def _even_out(
    kept: dict[str, tuple[str, ...]],
    moves: Mapping[str, tuple[str, str]],
    loads: Mapping[str, float],
    projected: _Loads,
) -> None:
    """Hands slots over, one at a time, from the node holding most to the least-loaded node that holds at least
    two fewer and reports no more load, give or take ``LOAD_NOISE`` (a busy node is for moves by load to relieve,
    not to fill), until none can.
    Without this, minimal moves left a node that joined after the others (or came back after a restart) with
    nothing while they held everything."""
    leaving = dict.fromkeys(projected.count, 0)  # a move's source lets go of its subscription soon
    for source, _ in moves.values():
        leaving[source] += 1

    def held(node: str) -> int:
        return projected.count[node] - leaving[node]

    def handover() -> tuple[str, str, str] | None:
        for node in sorted(projected.count, key=lambda n: (-held(n), n)):
            for name in sorted(s for s in kept if node in kept[s] and s not in moves):
                takers = [
                    n
                    for n in projected.count
                    if n not in kept[name] and held(n) <= held(node) - 2 and loads[n] <= loads[node] + LOAD_NOISE
                ]
                if takers:
                    return name, node, projected.order(takers)[0]
        return None

    while (step := handover()) is not None:  # each step narrows the spread: it ends
        name, node, taker = step
        kept[name] = tuple(taker if n == node else n for n in kept[name])
        projected.remove(node)
        projected.add(taker)


@dataclass(frozen=True)
class Rebalancing:
    """When a node counts as overloaded (its load above ``high``) and which node may take work from it (below
    ``low``): the gap between the two is the hysteresis that keeps a move from being undone by the next."""

    high: float = 0.8
    low: float = 0.5


def choose_move(
    assignment: Assignment,
    loads: Mapping[str, float],
    subscription_loads: Mapping[str, Mapping[str, float]],
    policy: Rebalancing,
) -> tuple[str, str, str] | None:
    """One move by load, or None: the heaviest subscription (by ``subscription_loads``, node -> subscription ->
    deliveries per second) of the most loaded node above ``high``, to the least-loaded node below ``low`` that does
    not run it yet. Nothing moves while another move is in progress."""
    if assignment.moves:
        return None
    overloaded = sorted((n for n in loads if loads[n] > policy.high), key=lambda n: -loads[n])
    for source in overloaded:
        running = assignment.of_node(source)
        by_weight = sorted(running, key=lambda s: (-subscription_loads.get(source, {}).get(s, 0.0), s))
        for name in by_weight:
            targets = [n for n in loads if loads[n] < policy.low and n not in assignment.subscriptions.get(name, ())]
            if targets:
                return name, source, min(targets, key=lambda n: (loads[n], n))
    return None


def start_move(assignment: Assignment, name: str, source: str, target: str) -> Assignment:
    """The assignment with ``target`` added beside ``source``: the old node goes only once the new one runs it."""
    subscriptions = dict(assignment.subscriptions)
    subscriptions[name] = (*subscriptions[name], target)
    return Assignment(
        subscriptions, assignment.standbys, {**assignment.moves, name: (source, target)}, assignment.rates
    )


def finish_moves(assignment: Assignment, running: Mapping[str, frozenset[str]]) -> Assignment:
    """Completes each move whose new node reports (``running``: node -> its subscriptions) that it runs it."""
    done = {s: m for s, m in assignment.moves.items() if s in running.get(m[1], frozenset())}
    if not done:
        return assignment
    subscriptions = dict(assignment.subscriptions)
    for name, (source, _) in done.items():
        subscriptions[name] = tuple(n for n in subscriptions[name] if n != source)
    moves = {s: m for s, m in assignment.moves.items() if s not in done}
    return Assignment(subscriptions, assignment.standbys, moves, assignment.rates)


class Standby:
    """When ``node`` takes over the subscriptions it stands by for: the k-th standby of a subscription starts it
    ``k x step`` seconds after its last assignee left the cluster, unless an assignment names live nodes for it
    meanwhile, so that several standbys never all start at once."""

    def __init__(self, node: str, step: float) -> None:
        self.node = node
        self.step = step
        self._orphaned: dict[str, float] = {}  # subscription -> when it was first seen without a live assignee

    def taken_over(self, assignment: Assignment, members: frozenset[str], now: float) -> frozenset[str]:
        taken = set()
        for name, nodes in assignment.subscriptions.items():
            standbys = assignment.standbys.get(name, ())
            if self.node not in standbys or any(n in members for n in nodes):
                self._orphaned.pop(name, None)
                continue
            since = self._orphaned.setdefault(name, now)
            if now - since >= (standbys.index(self.node) + 1) * self.step:
                taken.add(name)
        return frozenset(taken)

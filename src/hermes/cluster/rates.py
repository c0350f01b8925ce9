"""A subscription's ``rate`` is a limit for the whole cluster: the coordinator splits it into shares, one per
node delivering the subscription, that add up to the limit, and each node's rate limiter takes its share as its
maximum (node.py). The split follows use, as Hermes' negotiated maximum rates do: a node that uses less than
``BUSY`` of its share gives the unused part (keeping some headroom) to the nodes that use all of theirs; when
every node uses all of its share they drift back towards equal shares. Pure; the coordinator calls it at every
round with the attempts per second the nodes reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

BUSY = 0.9  # a node sending at this fraction of its share or more wants more
HEADROOM = 1.5  # a node that gives part of its share away keeps this much above its use
FLOOR = 0.1  # no share falls below this fraction of an equal share: a node's traffic may grow any moment
DRIFT = 0.5  # when all are busy, how far each share moves towards an equal share per round


def split_rate(
    limit: float, nodes: Sequence[str], use: Mapping[str, float], previous: Mapping[str, float]
) -> dict[str, float]:
    """Each node's share of ``limit`` given its ``use`` (attempts per second) and its ``previous`` share."""
    if not nodes:
        return {}
    equal = limit / len(nodes)
    shares = {n: previous[n] for n in nodes if n in previous}
    if len(shares) != len(nodes) or abs(sum(shares.values()) - limit) > 0.011 * len(nodes):
        return _fit(dict.fromkeys(nodes, equal), limit)  # a node came or went, or the limit changed
    busy = [n for n in nodes if use.get(n, 0.0) >= BUSY * shares[n]]
    if not busy:
        return _fit(shares, limit)
    if len(busy) == len(nodes):
        return _fit({n: s + (equal - s) * DRIFT for n, s in shares.items()}, limit)
    given = 0.0
    for node in nodes:
        if node not in busy:
            kept = min(shares[node], max(use.get(node, 0.0) * HEADROOM, equal * FLOOR))
            given += shares[node] - kept
            shares[node] = kept
    busy_total = sum(shares[n] for n in busy)
    for node in busy:
        shares[node] += given * shares[node] / busy_total if busy_total else given / len(busy)
    return _fit(shares, limit)


def _fit(shares: dict[str, float], limit: float) -> dict[str, float]:
    """Shares rounded down to 0.01 message/s, so that their sum never exceeds the limit through rounding (a
    share is never 0, which would stop the node: at least 0.01)."""
    total = sum(shares.values())
    scale = limit / total if total > limit else 1.0
    return {n: max(0.01, int(s * scale * 100) / 100) for n, s in shares.items()}

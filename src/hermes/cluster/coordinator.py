"""The coordinator: one consumers node at a time, elected with kazoo's Election recipe, keeps the assignment.

Every node contends (in a thread of its own); the winner recomputes the assignment (assignment.py) when a node
joins or leaves, when a subscription or a workload constraint changes, and at every load report interval, and
writes it when it changed, with each node's share of every subscription's rate limit (rates.py). When it dies,
its ZooKeeper session times out, its election znode goes, and the next contender takes over from the
assignment its predecessor left.

A round reads the subscriptions from the process's metadata cache (kept by the store's change notifications)
and the workload constraints from the store only after one of them changed, never the whole store each round.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooState

from hermes.cluster import assignment as algorithm
from hermes.cluster.rates import split_rate
from hermes.cluster.registry import CONSUMERS, ClusterStore
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription
from hermes.metadata.cache import MetadataCache
from hermes.metadata.documents import WORKLOAD_CONSTRAINTS
from hermes.metadata.repository import MetadataRepository
from hermes.metadata.zookeeper_session import CLOSE_TIMEOUT
from hermes.tasks import NamedThread

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CoordinatorSettings:
    limits: algorithm.Limits
    rebalancing: algorithm.Rebalancing
    interval: float  # seconds between rounds when nothing happens (the nodes' report interval)
    move_interval: float  # least seconds between two moves by load


class Coordinator:
    def __init__(
        self,
        store: ClusterStore,
        repository: MetadataRepository,
        cache: MetadataCache,
        node_id: str,
        settings: CoordinatorSettings,
    ) -> None:
        self._store = store
        self._repository = repository
        self._cache = cache
        self._constraints: dict[str, dict[str, Any]] = {}
        self._constraints_stale = True  # a workload constraint changed since they were read
        self._node_id = node_id
        self._settings = settings
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._election = store.election(node_id)
        self._thread = NamedThread(target=self._contend, name="cluster-coordinator", daemon=True)
        self._last_move = 0.0
        self.leading = False
        # called on the loop once the cache holds the change
        cache.on_subscription_change(self._on_subscription_change)
        cache.on_document_change(WORKLOAD_CONSTRAINTS, self._on_constraint_change)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Leaves the election. Without ZooKeeper, the thread's calls wait for the session's close, which
        releases them: it is not waited for (a stopping process must not wait for ZooKeeper)."""
        self._stop.set()
        self._wake.set()
        self._election.cancel()
        self._thread.join(CLOSE_TIMEOUT if self._store.client.connected else 0)

    def _contend(self) -> None:
        while not self._stop.is_set():
            try:
                self._election.run(self._lead)
            except Exception:
                if self._stop.is_set():
                    return  # the session closed under the stopping election
                log.exception("the coordinator failed; contending again")
                self._stop.wait(1.0)

    def _wake_up(self, _: object = None) -> bool | None:
        self._wake.set()
        return False if not self.leading else None  # a watch returning False ends itself

    def _lead(self) -> None:
        log.info("this node (%s) is the consumers' coordinator", self._node_id)
        self.leading = True
        self._last_move = time.monotonic()  # no move by load before the loads were seen for a while
        self._constraints_stale = True
        self._store.watch_members(CONSUMERS, self._wake_up)
        # its election znode lives as long as this session: once the session expired, another node may lead
        session = self._store.client.client_id
        try:
            while not self._stop.is_set() and self._in_session(session):
                try:
                    self._round()
                except Exception:
                    log.exception("the coordinator's round failed; trying again")
                self._wake.wait(self._settings.interval)
                self._wake.clear()
        finally:
            self.leading = False
            log.info("this node (%s) is no longer the coordinator", self._node_id)

    def _in_session(self, session: object) -> bool:
        client = self._store.client
        same: bool = client.state == KazooState.CONNECTED and client.client_id == session
        return same

    async def _on_subscription_change(self, topic: TopicName, name: str, subscription: Subscription | None) -> None:
        self._wake.set()

    async def _on_constraint_change(self, key: str) -> None:
        self._constraints_stale = True
        self._wake.set()

    def _round(self) -> None:
        members = self._store.members(CONSUMERS)
        if not members:  # its own node's session expired a moment ago: it would take every subscription from it
            return
        loads = {node: float(doc.get("load", {}).get("cpu", 0.0)) for node, doc in members.items()}
        # PENDING ones too: a consumer starting one makes it ACTIVE
        active = [s for s in list(self._cache.subscriptions.values()) if s.runs]
        names = [s.qualified_name.qualified for s in active]
        limits = {s.qualified_name.qualified: float(s.serial_policy.rate) for s in active if not s.is_batch}
        if self._constraints_stale:
            self._constraints_stale = False  # before reading: a change meanwhile is read at the next round
            self._constraints = self._repository.list_documents(WORKLOAD_CONSTRAINTS)
        constraints = self._constraints
        wanted = algorithm.wanted_consumers(names, constraints, self._settings.limits.consumers_per_subscription)
        current, version = self._store.read_assignment()
        new = algorithm.assign(wanted, loads, current, self._settings.limits)
        running = {node: frozenset(doc.get("running", ())) for node, doc in members.items()}
        new = algorithm.finish_moves(new, running)
        attempts = {node: doc.get("attemptsPerSecond", {}) for node, doc in members.items()}
        if time.monotonic() - self._last_move >= self._settings.move_interval:
            move = algorithm.choose_move(new, loads, attempts, self._settings.rebalancing)
            if move is not None:
                name, source, target = move
                log.info(
                    "moving %s from %s (load %.2f) to %s (load %.2f)",
                    name,
                    source,
                    loads[source],
                    target,
                    loads[target],
                )
                new = algorithm.start_move(new, name, source, target)
                self._last_move = time.monotonic()
        new = new.with_rates(
            {
                name: split_rate(
                    limits[name],
                    nodes,
                    {node: attempts.get(node, {}).get(name, 0.0) for node in nodes},
                    current.rates.get(name, {}),
                )
                for name, nodes in new.subscriptions.items()
                if name in limits
            }
        )
        if new != current and not self._store.write_assignment(new, version):
            self._wake.set()  # written by somebody else meanwhile: a new round on theirs

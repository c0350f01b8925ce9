"""This ``hermes consumers`` process as a member of the cluster: it registers, reports its load, contends for
coordination, and runs the subscriptions the assignment gives it (through the supervisor's placement), plus
those it takes over as a standby.

A standby of a subscription on one node starts it when every assignee has left the cluster and its own
staggered delay (assignment.Standby) has passed without a coordinator reassigning it; it stops again when an
assignment names the subscription's nodes anew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from hermes.cluster.assignment import Assignment, Standby
from hermes.cluster.coordinator import Coordinator, CoordinatorSettings
from hermes.cluster.load import LoadMeter
from hermes.cluster.registry import CONSUMERS, ClusterStore
from hermes.consumers.supervisor import ConsumersSupervisor
from hermes.errors import MetadataUnreachable
from hermes.metadata.cache import MetadataCache
from hermes.metadata.documents import ATTEMPT_OUTCOMES
from hermes.metadata.repository import MetadataRepository, until_reachable
from hermes.tasks import cancel

log = logging.getLogger(__name__)


class ConsumersNode:
    def __init__(
        self,
        store: ClusterStore,
        repository: MetadataRepository,
        cache: MetadataCache,
        node_id: str,
        address: Callable[[], str],
        coordination: CoordinatorSettings,
        standby_step: float,
    ) -> None:
        self.node_id = node_id
        self._store = store
        self._address = address
        self._interval = coordination.interval
        self._standby_step = standby_step
        self._coordinator = Coordinator(store, repository, cache, node_id, coordination)
        self._meter = LoadMeter()
        self._assignment = Assignment()
        self._assigned: frozenset[str] = frozenset()
        self._members: frozenset[str] = frozenset()
        self._standby = Standby(node_id, standby_step)
        self._taken_over: frozenset[str] = frozenset()
        self._attempts: dict[str, int] = {}
        self._supervisor: ConsumersSupervisor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Event()

    def runs(self, subscription: str) -> bool:
        """The supervisor's placement: assigned here, or taken over as a standby."""
        return subscription in self._assigned or subscription in self._taken_over

    def rate_share(self, subscription: str) -> float | None:
        """This node's share of the subscription's rate limit (None while it stands in for a dead node: the
        whole limit was that node's alone)."""
        return self._assignment.rates.get(subscription, {}).get(self.node_id)

    async def start(self, supervisor: ConsumersSupervisor) -> None:
        self._supervisor = supervisor
        # a connection that drops while it starts is waited for, as after the start (it exited the process)
        await until_reachable(self._store.register, CONSUMERS, self.node_id, self._report())
        loop = asyncio.get_running_loop()

        def assigned(assignment: Assignment) -> None:  # kazoo's thread
            loop.call_soon_threadsafe(self._on_assignment, assignment)

        def members(children: list[str]) -> None:
            loop.call_soon_threadsafe(self._on_members, frozenset(children))

        self._store.watch_assignment(assigned)
        self._store.watch_members(CONSUMERS, members)
        self._coordinator.start()
        self._tasks = [
            asyncio.create_task(self._follow(), name="cluster-follow"),
            asyncio.create_task(self._reporting(), name="cluster-report"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            await cancel(task)
        await asyncio.to_thread(self._coordinator.stop)
        await asyncio.to_thread(self._store.unregister, CONSUMERS, self.node_id)  # leave now, not at the timeout

    def _on_assignment(self, assignment: Assignment) -> None:
        self._assignment = assignment
        self._changed.set()

    def _on_members(self, members: frozenset[str]) -> None:
        self._members = members
        self._changed.set()

    async def _follow(self) -> None:
        """Applies the assignment and the standbys' timeouts to the supervisor whenever they change."""
        assert self._supervisor is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=self._standby_step / 4)
            self._changed.clear()
            assigned = self._assignment.of_node(self.node_id)
            taken_over = self._standby.taken_over(self._assignment, self._members, time.monotonic())
            if assigned != self._assigned or taken_over != self._taken_over:
                for name in taken_over - self._taken_over:
                    log.warning("taking over %s as its standby: its node left and nobody reassigned it", name)
                self._assigned, self._taken_over = assigned, taken_over
                await self._supervisor.replace()
            self._apply_rate_shares()  # also to a consumer started again after a crash

    async def _reporting(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await asyncio.to_thread(self._store.report, CONSUMERS, self.node_id, self._report())
            except MetadataUnreachable as exc:  # the next report tries again
                log.warning("reporting this node's load to ZooKeeper failed: %s", exc.message)
            except Exception:
                log.warning("reporting this node's load to ZooKeeper failed", exc_info=True)

    def _report(self) -> dict[str, Any]:
        consumers = self._supervisor.consumers if self._supervisor is not None else {}
        attempts = {
            f"{t}${n}": sum(c.metrics.totals[outcome] for outcome in ATTEMPT_OUTCOMES)
            for (t, n), c in consumers.items()
        }
        per_second = {
            name: round(max(0, count - self._attempts.get(name, count)) / self._interval, 2)
            for name, count in attempts.items()
        }
        self._attempts = attempts
        return {
            "id": self.node_id,
            "address": self._address(),
            "load": self._meter.sample(),
            "running": sorted(attempts),
            "attemptsPerSecond": per_second,
            "updatedAt": int(time.time() * 1000),
        }

    def _apply_rate_shares(self) -> None:
        """Each running consumer's maximum rate: this node's share of the cluster-wide limit."""
        assert self._supervisor is not None
        for (topic, name), consumer in self._supervisor.consumers.items():
            consumer.delivery.set_rate_share(self.rate_share(f"{topic}${name}"))

"""How the roles of a process join the cluster: the consumers node (node.py) and a frontend's registration."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from urllib.parse import quote

from hermes.cluster.assignment import Limits, Rebalancing
from hermes.cluster.coordinator import CoordinatorSettings
from hermes.cluster.load import LoadMeter
from hermes.cluster.node import ConsumersNode
from hermes.cluster.registry import FRONTENDS, ClusterStore
from hermes.config import Settings
from hermes.errors import MetadataUnreachable
from hermes.metadata.cache import MetadataCache
from hermes.metadata.repository import MetadataRepository, until_reachable
from hermes.tasks import cancel

log = logging.getLogger(__name__)


def open_store(settings: Settings) -> ClusterStore:
    return ClusterStore(settings.zookeeper_connect, settings.zookeeper_root, settings.cluster_session_timeout)


def consumers_node(
    settings: Settings,
    store: ClusterStore,
    repository: MetadataRepository,
    cache: MetadataCache,
    address: Callable[[], str],
) -> ConsumersNode:
    """``address``: where the node answers health and metrics, once its servers listen."""
    s = settings
    coordination = CoordinatorSettings(
        limits=Limits(s.consumers_per_subscription, s.max_subscriptions_per_consumer),
        rebalancing=Rebalancing(s.cluster_load_high, s.cluster_load_low),
        interval=s.cluster_report_interval,
        move_interval=s.cluster_move_interval,
    )
    return ConsumersNode(store, repository, cache, s.node_id, address, coordination, s.cluster_standby_timeout)


class FrontendMember:
    """A frontend process in ZooKeeper, for publishers that pick the least-loaded frontend (discovery.py). Each
    process of ``hermes frontend --workers N`` registers: they share the address, and discovery adds them up."""

    def __init__(self, store: ClusterStore, address: str, interval: float) -> None:
        self._store = store
        self._address = address
        self._name = f"{quote(address, safe='')}-{os.getpid()}"
        self._interval = interval
        self._meter = LoadMeter()
        self._task: asyncio.Task[None] | None = None

    def _report(self) -> dict[str, object]:
        return {"address": self._address, "load": self._meter.sample(), "updatedAt": int(time.time() * 1000)}

    async def start(self) -> None:
        # a connection that drops while it starts is waited for, as after the start (it exited the process)
        await until_reachable(self._store.register, FRONTENDS, self._name, self._report())
        self._task = asyncio.create_task(self._reporting(), name="frontend-report")

    async def _reporting(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await asyncio.to_thread(self._store.report, FRONTENDS, self._name, self._report())
            except MetadataUnreachable as exc:  # the next report tries again
                log.warning("reporting this frontend's load to ZooKeeper failed: %s", exc.message)
            except Exception:
                log.warning("reporting this frontend's load to ZooKeeper failed", exc_info=True)

    async def stop(self) -> None:
        await cancel(self._task)
        await asyncio.to_thread(self._store.unregister, FRONTENDS, self._name)

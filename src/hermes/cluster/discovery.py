"""For publishers: the least-loaded frontend of a cluster, from the frontends' registrations in ZooKeeper (as
producers pick workers in ``004_*``). Every process of a frontend registers under the address they share; an
address's load is the mean CPU of its processes::

    from hermes.cluster.discovery import FrontendDiscovery

    with FrontendDiscovery("zk1:2181,zk2:2181") as frontends:
        url = frontends.least_loaded()  # e.g. "http://10.0.0.7:8080"; publish to f"{url}/topics/{topic}"
"""

from __future__ import annotations

from collections import defaultdict
from types import TracebackType

from hermes.cluster.registry import FRONTENDS, ClusterStore
from hermes.errors import ServiceUnavailable


class NoFrontend(ServiceUnavailable):
    """No frontend is registered in the cluster."""


class FrontendDiscovery:
    def __init__(self, zookeeper_connect: str, root: str = "/hermes", session_timeout: float = 10.0) -> None:
        self._store = ClusterStore(zookeeper_connect, root, session_timeout)

    def loads(self) -> dict[str, float]:
        """Each frontend address and the mean CPU load of its processes."""
        cpu: dict[str, list[float]] = defaultdict(list)
        for report in self._store.members(FRONTENDS).values():
            cpu[str(report["address"])].append(float(report.get("load", {}).get("cpu", 0.0)))
        return {address: sum(values) / len(values) for address, values in cpu.items()}

    def least_loaded(self) -> str:
        loads = self.loads()
        if not loads:
            raise NoFrontend("no frontend is registered in ZooKeeper")
        return min(loads, key=lambda address: (loads[address], address))

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> FrontendDiscovery:
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

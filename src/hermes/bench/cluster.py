"""Distributed mode (docs/cluster.md): a ZooKeeper, a management, a frontend and two ``hermes consumers`` nodes,
each its own process, on the suite's broker, with the default cluster settings.

- Delivery rate of one subscription served by one node, then by two (its workload constraint): a backlog of
  SERIAL messages drained, from the first arrival to the last.
- Failover: a subscription on one node under a steady publishing rate; its node is SIGKILLed; the time from the
  kill to the first delivery by the node that takes over (bounded by the ZooKeeper session timeout, 10 s by
  default, plus a coordinator round and the new consumer's start). Every message published is reconciled.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from hermes.bench.load import Sink
from hermes.bench.system import Management, child
from hermes.bench.zookeeper import ZOOKEEPER_JAR, ZookeeperServer
from hermes.broker.embedded import free_port
from hermes.config import Settings

BACKLOG = 4000
STEADY_RATE = 50.0  # messages/s published during the failover


class _Cluster:
    def __init__(self, work: Path, bootstrap: str, zookeeper: str) -> None:
        self.work, self.bootstrap, self.zookeeper = work, bootstrap, zookeeper
        self.ports = {name: free_port() for name in ("management", "frontend", "n1", "n2")}
        self.processes: dict[str, Any] = {}
        self.stack = contextlib.ExitStack()

    def start(self, name: str) -> None:
        role = {"management": "management", "frontend": "frontend"}.get(name, "consumers")
        port_flag = f"--{role}-port"
        argv = [
            sys.executable,
            "-m",
            "hermes",
            role,
            "--data-dir",
            str(self.work / name),
            "--kafka-bootstrap-servers",
            self.bootstrap,
            "--metadata-store",
            "zookeeper",
            "--zookeeper-connect",
            self.zookeeper,
            port_flag,
            str(self.ports[name]),
            "--log-level",
            "WARNING",
            *(("--workers", "1") if role == "frontend" else ()),
            *(("--node-id", name) if role == "consumers" else ()),
        ]
        self.processes[name] = self.stack.enter_context(child(argv, self.ports[name]))

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"


@contextlib.contextmanager
def _cluster(work: Path, bootstrap: str) -> Iterator[_Cluster]:
    server = ZookeeperServer(work / "zookeeper").start()
    cluster = _Cluster(work, bootstrap, server.connect)
    try:
        with cluster.stack:
            for name in ("management", "frontend", "n1", "n2"):
                cluster.start(name)
            yield cluster
    finally:
        server.stop()


async def _nodes(session: aiohttp.ClientSession, management: str) -> dict[str, dict[str, Any]]:
    async with session.get(f"{management}/consumers/nodes") as response:
        return {node["nodeId"]: node for node in await response.json()}


async def _running_on(session: aiohttp.ClientSession, management: str, subscription: str) -> list[str]:
    nodes = await _nodes(session, management)
    return [n for n, r in nodes.items() if subscription in r["subscriptions"] and subscription in r["running"]]


async def _until(check: Any, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.2)
    return False


def _received(sink: Sink, name: str, ids: list[str]) -> Any:
    """A check that every message of ``ids`` arrived (duplicates do not count)."""

    async def check() -> bool:
        return not set(ids) - {message for message, _ in sink.arrivals.get(name, [])}

    return check


async def _publish(session: aiohttp.ClientSession, frontend: str, topic: str, count: int) -> list[str]:
    ids: list[str] = []

    async def one(n: int) -> None:
        async with session.post(
            f"{frontend}/topics/{topic}", data=f'{{"n": {n}}}'.encode(), headers={"Content-Type": "application/json"}
        ) as response:
            if response.status in (201, 202):
                ids.append(response.headers["Hermes-Message-Id"])

    for start in range(0, count, 32):
        await asyncio.gather(*(one(n) for n in range(start, min(count, start + 32))))
    return ids


async def _subscription(
    session: aiohttp.ClientSession, c: _Cluster, api: Management, topic: str, name: str, nodes: int, sink: Sink
) -> bool:
    """The subscription, on ``nodes`` nodes (its workload constraint), once each of them runs it."""
    body = {"subscriptionName": f"{topic}${name}", "constraints": {"consumersNumber": nodes}}
    async with session.put(f"{c.url('management')}/workload-constraints/subscription", json=body) as response:
        await response.read()
    await api.subscription(topic, name, sink.url(name))
    qualified = f"{topic}${name}"

    async def ready() -> bool:
        return len(await _running_on(session, c.url("management"), qualified)) == nodes

    return await _until(ready, 90)


async def _drain(
    session: aiohttp.ClientSession, c: _Cluster, api: Management, sink: Sink, nodes: int
) -> dict[str, Any]:
    topic = await api.topic("benchcluster", f"drain{nodes}")
    name = f"drain{nodes}"
    if not await _subscription(session, c, api, topic, name, nodes, sink):
        return {"nodes": nodes, "void": True, "error": "the subscription was not assigned within 90 s"}
    await api.state(topic, name, "SUSPENDED")

    async def stopped() -> bool:
        return not await _running_on(session, c.url("management"), f"{topic}${name}")

    await _until(stopped, 60)
    ids = await _publish(session, c.url("frontend"), topic, BACKLOG)
    await api.state(topic, name, "ACTIVE")
    complete = await _until(_received(sink, name, ids), 120)
    arrivals = sink.arrivals.get(name, [])
    got = {message for message, _ in arrivals}
    missing = len(set(ids) - got)
    times = sorted(at for _, at in arrivals)
    seconds = times[-1] - times[0] if len(times) > 1 else 0.0
    return {
        "nodes": nodes,
        "messages": len(ids),
        "deliveries_per_s": round(len(arrivals) / seconds) if seconds else 0,
        "missing": missing,
        "duplicates": len(arrivals) - len(got),
        "void": bool(missing) or not complete,
    }


async def _failover(session: aiohttp.ClientSession, c: _Cluster, api: Management, sink: Sink) -> dict[str, Any]:
    topic = await api.topic("benchcluster", "failover")
    name = "failover"
    if not await _subscription(session, c, api, topic, name, 1, sink):
        return {"void": True, "error": "the subscription was not assigned within 90 s"}
    victim = (await _running_on(session, c.url("management"), f"{topic}${name}"))[0]
    published: list[str] = []
    stop = asyncio.Event()

    async def steady() -> None:
        n = 0
        while not stop.is_set():
            published.extend(await _publish(session, c.url("frontend"), topic, 1))
            n += 1
            await asyncio.sleep(1 / STEADY_RATE)

    publisher = asyncio.create_task(steady())
    await asyncio.sleep(2.0)
    c.processes[victim].send_signal(signal.SIGKILL)
    killed = time.monotonic()

    async def delivered_again() -> bool:
        return any(at > killed for _, at in sink.arrivals.get(name, []))

    took_over = await _until(delivered_again, 90)
    first = min((at for _, at in sink.arrivals.get(name, []) if at > killed), default=killed)
    await asyncio.sleep(2.0)
    stop.set()
    await publisher
    complete = await _until(_received(sink, name, published), 60)
    got = {message for message, _ in sink.arrivals.get(name, [])}
    missing = len(set(published) - got)
    return {
        "session_timeout_s": Settings.model_fields["cluster_session_timeout"].default,
        "kill_to_first_delivery_s": round(first - killed, 2) if took_over else None,
        "published": len(published),
        "missing": missing,
        "duplicates": len(sink.arrivals.get(name, [])) - len(got),
        "void": bool(missing) or not complete or not took_over,
    }


async def cluster(bootstrap: str, sink: Sink, work: Path) -> dict[str, Any]:
    if shutil.which("java") is None or not ZOOKEEPER_JAR.exists():
        return {"available": False, "note": "ZooKeeper is not installed (Debian's zookeeper package)"}
    with _cluster(work, bootstrap) as c:
        async with aiohttp.ClientSession() as session:
            api = Management(session, c.url("management"))
            drains = [await _drain(session, c, api, sink, nodes) for nodes in (1, 2)]
            failover = await _failover(session, c, api, sink)
    one, two = (d.get("deliveries_per_s", 0) for d in drains)
    return {
        "available": True,
        "drain": drains,
        "two_nodes_vs_one": round(two / one, 2) if one else None,
        "failover": failover,
        "void": any(d.get("void") for d in drains) or bool(failover.get("void")),
    }

"""Distributed mode (docs/cluster.md): a ZooKeeper, a management, a frontend and two ``hermes consumers`` nodes,
each its own process, on the suite's broker, with the default cluster settings.

- Delivery rate of one subscription served by one node, then by two (its workload constraint): a backlog of
  SERIAL messages drained, from the first arrival to the last.
- Failover: a subscription on one node and one on both under a steady publishing rate; the node of the first is
  SIGKILLed, started again, SIGKILLed again, then stopped with SIGTERM twice the same way. Per stop: the time to
  the last late delivery (bounded by the ZooKeeper session timeout, 10 s by default, plus a coordinator round and
  the new consumer's start, for the one-node subscription; by Kafka's session timeout, 6 s, for the other) and
  the duplicates. Every message published is reconciled.

Alone: ``python -m hermes.bench.cluster`` (its own broker; ``failover`` for the failovers only).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from hermes.bench.interrupt import alone
from hermes.bench.load import Sink
from hermes.bench.system import Management, child
from hermes.bench.zookeeper import ZOOKEEPER_JAR, ZookeeperServer
from hermes.broker.embedded import EmbeddedBroker, free_port
from hermes.config import Settings

BACKLOG = 4000
STEADY_RATE = 50.0  # messages/s published during the failovers
STOPS = (signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGTERM)  # a crash twice, then a planned stop twice
LATE = 1.0  # seconds from publish to delivery above which a delivery waited for a failover


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


async def _failovers(session: aiohttp.ClientSession, c: _Cluster, api: Management, sink: Sink) -> dict[str, Any]:
    """Under a steady publishing rate, the node of a one-node subscription (``single``; both nodes run ``shared``)
    is stopped by each signal of ``STOPS`` in turn and started again. Per stop and subscription, from the signal
    until the restart and from the restart until the next stop: the seconds to the last late delivery (one that
    came more than ``LATE`` s after its publish) and the duplicates."""
    topic = await api.topic("benchcluster", "failover")
    management = c.url("management")
    wanted = {"single": 1, "shared": 2}
    for name, nodes in wanted.items():
        if not await _subscription(session, c, api, topic, name, nodes, sink):
            return {"void": True, "error": f"{name} was not assigned within 90 s"}
    published: dict[str, float] = {}
    stop = asyncio.Event()

    async def steady() -> None:
        while not stop.is_set():
            for message in await _publish(session, c.url("frontend"), topic, 1):
                published[message] = time.monotonic()
            await asyncio.sleep(1 / STEADY_RATE)

    async def settled() -> bool:
        running = [await _running_on(session, management, f"{topic}${name}") for name in wanted]
        return [len(nodes) for nodes in running] == list(wanted.values())

    publisher = asyncio.create_task(steady())
    events: list[tuple[str, float]] = []  # each stop's signal and when it was sent, then "restart" and when
    try:
        await asyncio.sleep(2.0)
        for sig in STOPS:
            victim = (await _running_on(session, management, f"{topic}$single"))[0]
            c.processes[victim].send_signal(sig)
            events.append((sig.name, time.monotonic()))
            await asyncio.to_thread(c.processes[victim].wait, 60)

            async def gone(victim: str = victim) -> bool:
                return victim not in await _nodes(session, management)

            if not await _until(gone, 60):
                return {"void": True, "error": f"{victim} did not leave the cluster within 60 s"}
            await asyncio.sleep(LATE + 2.0)  # the late deliveries of the failover come meanwhile
            events.append(("restart", time.monotonic()))
            c.start(victim)
            if not await _until(settled, 90):
                return {"void": True, "error": f"{victim} did not take its subscriptions again within 90 s"}
            await asyncio.sleep(LATE + 2.0)
    finally:
        stop.set()
        await publisher
    complete = all([await _until(_received(sink, name, list(published)), 60) for name in wanted])
    ends = [at for _, at in events[1:]] + [float("inf")]
    windows = [(what, at, end) for (what, at), end in zip(events, ends, strict=True)]
    per_stop = []
    for (signal_name, stopped, restarted), (_, _, end) in zip(windows[::2], windows[1::2], strict=True):
        figures: dict[str, Any] = {"signal": signal_name}
        for name in wanted:
            figures[name] = {
                "stop": _window(sink.arrivals.get(name, []), published, stopped, restarted),
                "restart": _window(sink.arrivals.get(name, []), published, restarted, end),
            }
        per_stop.append(figures)
    missing = sum(len(set(published) - {m for m, _ in sink.arrivals.get(name, [])}) for name in wanted)
    return {
        "session_timeout_s": Settings.model_fields["cluster_session_timeout"].default,
        "kafka_session_timeout_s": Settings.model_fields["consumer_session_timeout_ms"].default / 1000,
        "commit_interval_s": float(
            os.environ.get("HERMES_CONSUMER_COMMIT_INTERVAL", Settings.model_fields["consumer_commit_interval"].default)
        ),
        "rate": STEADY_RATE,
        "published": len(published),
        "stops": per_stop,
        "missing": missing,
        "void": bool(missing) or not complete,
    }


def _window(arrivals: list[tuple[str, float]], published: dict[str, float], start: float, end: float) -> dict[str, Any]:
    """Of the arrivals from ``start`` to ``end``: seconds from ``start`` to the last late one (0 when none was
    late) and the duplicates (messages that had come before)."""
    seen: set[str] = set()
    duplicates, last_late = 0, start
    for message, arrived in arrivals:
        if start <= arrived < end:
            duplicates += message in seen
            if arrived - published.get(message, arrived) > LATE:
                last_late = max(last_late, arrived)
        seen.add(message)
    return {"last_late_delivery_s": round(last_late - start, 2), "duplicates": duplicates}


async def cluster(bootstrap: str, sink: Sink, work: Path, drains: bool = True) -> dict[str, Any]:
    if shutil.which("java") is None or not ZOOKEEPER_JAR.exists():
        return {"available": False, "note": "ZooKeeper is not installed (Debian's zookeeper package)"}
    with _cluster(work, bootstrap) as c:
        async with aiohttp.ClientSession() as session:
            api = Management(session, c.url("management"))
            drained = [await _drain(session, c, api, sink, nodes) for nodes in (1, 2) if drains]
            failover = await _failovers(session, c, api, sink)
    one, two = (d.get("deliveries_per_s", 0) for d in drained) if drained else (0, 0)
    return {
        "available": True,
        "drain": drained,
        "two_nodes_vs_one": round(two / one, 2) if one else None,
        "failover": failover,
        "void": any(d.get("void") for d in drained) or bool(failover.get("void")),
    }


async def _alone(only_failover: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as data:
        broker = EmbeddedBroker(Path(data) / "kafka")
        broker.start()
        sink = Sink()
        await sink.start()
        try:
            return await cluster(broker.bootstrap_servers, sink, Path(data) / "cluster", drains=not only_failover)
        finally:
            await sink.stop()
            broker.stop()


if __name__ == "__main__":
    alone(lambda: print(json.dumps(asyncio.run(_alone("failover" in sys.argv[1:])), indent=2)))

"""Distributed mode in tests: hermes processes on one ZooKeeper root and the session's Kafka, with short
session timeouts and intervals, and readers of what management's /consumers/nodes says."""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import httpx
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from hermes.bench.zookeeper import ZookeeperServer
from hermes.broker.embedded import EmbeddedBroker
from hermes.metadata.secrets import KEYS_VARIABLE, new_key
from hermes.metadata.zookeeper_session import ZookeeperSession
from tests.support.hermes import HermesProcess
from tests.support.kafka_cluster import KafkaCluster, ZookeeperEnsemble
from tests.support.waiting import wait_until

SESSION_TIMEOUT = 2.0  # a dead member leaves the cluster this long after its last heartbeat
REPORT_INTERVAL = 0.5
STANDBY_TIMEOUT = 1.0
# docs/cluster.md's bound of a failover (kill to the replacement running the subscription): the session
# timeout, a coordinator round and a consumer's start (10 s allowed on a loaded machine).
FAILOVER_BOUND = SESSION_TIMEOUT + REPORT_INTERVAL + 10.0


class Cluster:
    def __init__(
        self,
        tmp: Path,
        kafka: EmbeddedBroker | KafkaCluster,
        zookeeper: ZookeeperServer | ZookeeperEnsemble,
        root: str,
    ) -> None:
        self.tmp, self.kafka, self.zookeeper, self.root = tmp, kafka, zookeeper, root
        self.processes: dict[str, HermesProcess] = {}
        self.secrets_keys = new_key()  # every process reads the secrets any of them stored

    def flags(self) -> list[str]:
        return [
            "--metadata-store=zookeeper",
            f"--zookeeper-connect={self.zookeeper.connect}",
            f"--zookeeper-root={self.root}",
            f"--kafka-bootstrap-servers={self.kafka.bootstrap_servers}",
            f"--cluster-session-timeout={SESSION_TIMEOUT}",
            f"--cluster-report-interval={REPORT_INTERVAL}",
        ]

    def settings(self) -> dict[str, Any]:
        """The same, for a Hermes in the test's process."""
        return {
            "metadata_store": "zookeeper",
            "zookeeper_connect": self.zookeeper.connect,
            "zookeeper_root": self.root,
            "cluster_session_timeout": SESSION_TIMEOUT,
            "cluster_report_interval": REPORT_INTERVAL,
        }

    def start(self, name: str, command: str, *args: str) -> HermesProcess:
        """A ``consumers`` node (its node id is ``name``), a ``frontend`` or a ``management`` process; its own
        process group, so that SIGKILL takes a frontend's workers along (``kill``)."""
        extra = {
            "consumers": [f"--node-id={name}", f"--cluster-standby-timeout={STANDBY_TIMEOUT}"],
            "frontend": ["--workers=1"],
        }.get(command, [])
        env = {KEYS_VARIABLE: self.secrets_keys}
        process = HermesProcess(self.tmp / name, *self.flags(), *extra, *args, command=command, env=env)
        wait_for = {"consumers": "nothing", "frontend": "frontend"}.get(command, "management")
        self.processes[name] = process  # before it starts: ``stop`` ends it even if its start fails
        return process.start(wait_for=wait_for, own_group=True)

    def restart(self, name: str) -> HermesProcess:
        """The process again on its data directory and ports (a frontend replays its journal)."""
        process = self.processes[name]
        command = process.argv[3]
        wait_for = {"consumers": "nothing", "frontend": "frontend"}.get(command, "management")
        return process.start(wait_for=wait_for, own_group=True)

    def kill(self, name: str) -> None:
        self.processes[name].kill()

    def stop(self) -> None:
        """Kills every process group, including those whose first process has exited already (a frontend's
        workers outlive it)."""
        for process in self.processes.values():
            if process.process is not None:
                process.kill()


def nodes(management: httpx.Client) -> dict[str, dict[str, Any]]:
    """``GET /consumers/nodes``, asked again for 10 s at most while it answers 503: with the tests' 2 s sessions, a
    process that stalls 1.3 s on a loaded machine loses ZooKeeper for a moment, and answers 503 meanwhile."""
    deadline = time.monotonic() + 10
    while (response := management.get("/consumers/nodes")).status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert response.status_code == 200, response.text
    return {node["nodeId"]: node for node in response.json()}


def assigned(management: httpx.Client) -> dict[str, list[str]]:
    """Subscription -> the live nodes assigned to it that report running it."""
    out: dict[str, list[str]] = {}
    for node, report in nodes(management).items():
        for name in report["subscriptions"]:
            if name in report["running"]:
                out.setdefault(name, []).append(node)
    return out


def coordinator(management: httpx.Client) -> str | None:
    return next((n for n, report in nodes(management).items() if report["coordinator"]), None)


class OutageZookeeper(ZookeeperServer):
    """A ZooKeeper server a test takes away: paused (SIGSTOP: it falls silent, as behind a network partition) or
    killed, and back on the same port and data."""

    def pause(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        assert self._process is not None
        self._process.kill()
        self._process.wait(30)

    def ensure_running(self) -> None:
        """Back as it was, whatever a failed test left it in."""
        assert self._process is not None
        if self._process.poll() is None:
            self.resume()
        else:
            self.start()


def expire_session(session: ZookeeperSession, expired: tuple[int, bytes], connect: str) -> None:
    """Waits for ``session`` to have a new ZooKeeper session instead of ``expired``, closing that one from another
    connection (as ZooKeeper does when a session times out) while its own client still holds it."""

    def renewed() -> bool:
        current = session.client.client_id
        if current is None or current[0] != expired[0]:
            return current is not None  # None: expired, the new session not there yet
        other = KazooClient(hosts=connect, client_id=expired, timeout=2)
        with contextlib.suppress(KazooTimeoutError):
            other.start(timeout=10)
            other.stop()
        other.close()
        return False

    wait_until(renewed, timeout=30, interval=0.5)

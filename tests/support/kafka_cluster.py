"""A Kafka cluster of three KRaft nodes (each a controller and a broker) and a ZooKeeper ensemble of three servers,
sized for a 2-core test machine beside Hermes: small heaps, the serial collector, few threads."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka.admin import AdminClient

from hermes.bench.zookeeper import ZookeeperServer
from hermes.broker.embedded import EmbeddedBroker, free_port, new_cluster_id
from tests.support.waiting import wait_until

# Replicated as in production (docs/deployment.md): three copies, two of them in sync before an ack ALL.
DURABLE = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",  # the consumers' committed offsets outlive a broker too
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}
SMALL = {
    "num.network.threads": "1",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.replica.fetchers": "1",
    "log.cleaner.threads": "1",
    # a killed broker is fenced, and its partitions led by another, this long after its last heartbeat
    # (Kafka's 9 s would stall the partitions it led for as long)
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
JVM_OPTIONS = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:ActiveProcessorCount=1",  # sizes the JVM's own thread pools for a share of two cores
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
HEAP_MB = 256


class KafkaCluster:
    """``size`` nodes whose quorum is all of them; ``bootstrap_servers`` names every broker."""

    def __init__(self, directory: Path, size: int = 3) -> None:
        cluster_id = new_cluster_id()
        controller_ports = {n: free_port() for n in range(1, size + 1)}
        voters = ",".join(f"{n}@127.0.0.1:{port}" for n, port in controller_ports.items())
        self.nodes = {
            n: EmbeddedBroker(
                directory / f"kafka{n}",
                heap_mb=HEAP_MB,
                controller_port=port,
                cluster_id=cluster_id,
                settings={**DURABLE, **SMALL, "node.id": str(n), "controller.quorum.voters": voters},
                jvm_options=JVM_OPTIONS,
            )
            for n, port in controller_ports.items()
        }
        self._admin: AdminClient | None = None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes.values())

    def start(self, timeout: float = 120) -> KafkaCluster:
        """All nodes at once: none is ready before a majority of the quorum runs."""
        try:
            for node in self.nodes.values():
                node.launch()
            for node in self.nodes.values():
                node.wait_until_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node id of the partition's leader (-1 while it has none)."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        metadata = self._admin.list_topics(topic, timeout=10)
        return int(metadata.topics[topic].partitions[partition].leader)

    def kill(self, node_id: int) -> None:
        """SIGKILL: the node crashes, its files stay as they were."""
        pid = self.nodes[node_id].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        self.nodes[node_id].stop()  # reaps it and releases its directory

    def stop(self) -> None:
        """Kills every node: a controlled shutdown of the last ones waits for a quorum that is gone."""
        for node_id, node in self.nodes.items():
            if node.pid is not None:
                self.kill(node_id)


class ZookeeperEnsemble:
    """``size`` ZooKeeper servers of one ensemble; ``connect`` names every server."""

    def __init__(self, directory: Path, size: int = 3) -> None:
        peers = [f"127.0.0.1:{free_port()}:{free_port()}" for _ in range(size)]
        self.servers = [ZookeeperServer(directory / f"zk{n}", myid=n, servers=peers) for n in range(1, size + 1)]

    @property
    def connect(self) -> str:
        return ",".join(server.connect for server in self.servers)

    def start(self, timeout: float = 60) -> ZookeeperEnsemble:
        with ThreadPoolExecutor(len(self.servers)) as pool:  # at once: a server waits for its peers
            for started in [pool.submit(server.start, timeout) for server in self.servers]:
                started.result()
        wait_until(lambda: len(self.modes()) == len(self.servers), timeout=timeout)
        return self

    def modes(self) -> list[str]:
        """The modes of the servers that serve clients (a server without a quorum does not)."""
        return [mode for mode in (server.mode() for server in self.servers) if mode is not None]

    def leader(self) -> ZookeeperServer:
        return next(server for server in self.servers if server.mode() == "leader")

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

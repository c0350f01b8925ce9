"""A real ZooKeeper server from Debian's ``zookeeper`` package, standalone or one server of an ensemble, on a free
port: for the tests and the benchmark's cluster scenario."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from hermes.broker.embedded import free_port
from hermes.children import spawn_tied

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")


class ZookeeperServer:
    """Standalone, or server ``myid`` of the ensemble whose ``servers`` are ``host:peer_port:election_port``, in
    the order of their ids (from 1)."""

    def __init__(self, workdir: Path, *, myid: int = 0, servers: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.myid = myid
        self.servers = list(servers)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ZookeeperServer:
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.exists():
            raise RuntimeError("ZooKeeper is not installed: run scripts/setup.sh (Debian package 'zookeeper')")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "zoo.cfg"
        ensemble = "".join(f"server.{n}={server}\n" for n, server in enumerate(self.servers, start=1))
        if ensemble:
            (data / "myid").write_text(f"{self.myid}\n")
            ensemble += "initLimit=10\nsyncLimit=5\n"
        config.write_text(
            f"tickTime=500\ndataDir={data}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr\n" + ensemble
        )
        with open(self.workdir / "zookeeper.log", "ab") as log:  # the child keeps its own descriptor
            self._process = spawn_tied(  # no ZooKeeper left behind by a test run killed midway
                [
                    java,
                    "-Xmx256m",
                    "-Dzookeeper.log.dir=" + str(self.workdir),
                    "-cp",
                    f"/etc/zookeeper/conf:{ZOOKEEPER_JAR}",
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(config),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {(self.workdir / 'zookeeper.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"ruok")
                    if s.recv(4) == b"imok":
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not start within {timeout} s")

    def mode(self) -> str | None:
        """``leader``, ``follower`` or ``standalone`` while it serves clients; None otherwise."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"srvr")
                answer = b"".join(iter(lambda: s.recv(4096), b"")).decode(errors="replace")
        except OSError:
            return None
        return next((line.split(":", 1)[1].strip() for line in answer.splitlines() if line.startswith("Mode:")), None)

    def kill(self) -> None:
        """SIGKILL: a server that crashes."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

"""The embedded broker: Apache Kafka in KRaft mode, one node that is its own controller, run as a child process.

Its log directory lives in the data directory, is formatted on first start and reused afterwards, so what it
stored survives a restart (Ctrl-C, SIGTERM or SIGKILL). The jars are fetched by ``make setup`` (jars/kafka.pom.xml);
nothing is downloaded at run time. The child is tied to this process (``hermes.children``), so it dies with us
even on SIGKILL and never lingers.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from confluent_kafka.admin import AdminClient

from hermes.broker.embedded_security import BrokerSecurity, client_settings, format_arguments, server_settings
from hermes.children import spawn_tied
from hermes.datadir import DataDirLock
from hermes.errors import StartupError
from hermes.jars import jars_classpath

log = logging.getLogger(__name__)

STOP_TIMEOUT = 30.0  # a controlled shutdown of one node takes about a second; a hung JVM is killed after this

# One machine, low latency, everything replicated once. Written to server.properties on each start.
_SERVER_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",  # a new subscription's consumer joins at once
    "group.min.session.timeout.ms": "1000",  # lets tests and small deployments detect a dead consumer quickly
    "auto.create.topics.enable": "false",  # Hermes creates every topic with its settings; a typo must not create one
    "log.retention.check.interval.ms": "60000",
    # The log cleaner (compacting __consumer_offsets) allocates its dedupe buffer once and for good: Kafka's 128 MiB
    # made 160 of the 256 MiB starting heap old and live, so G1 ran a marking cycle (remark pause) after every other
    # young pause under load. 16 MiB holds about 600,000 keys a cleaning pass; more take more passes.
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
}
_LOG4J = """\
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""
_JVM_OPTIONS = [
    # C1 only: C2 compiled the broker's hot paths for the first minutes under load, at 20-33 µs of CPU per publish
    # (as much as the broker's own request handling), on the same cores as Hermes; C1's code serves a single
    # node's produce and fetch requests no slower here (see docs/benchmarks.md)
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    # An idle broker gives back the heap a burst made it take (G1 keeps up to 70 % of its heap free by default):
    # a collection after 30 s without one, then at most 30 % free
    "-XX:G1PeriodicGCInterval=30000",
    "-XX:MinHeapFreeRatio=10",
    "-XX:MaxHeapFreeRatio=30",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def ephemeral_ports() -> range:
    """The ports the kernel gives a socket that connect()s or bind()s to port 0 (Linux: ip_local_port_range)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def broker_port(host: str = "127.0.0.1") -> int:
    """A free port outside the ephemeral range, for a broker that must find its port free again when it restarts.
    While nothing listens on a port of the range, any process of the machine can be given it: bind(0) hands out
    its odd ports, connect() its even ones, and a client retrying a dead broker's even port connects to itself
    (docs/broker.md)."""
    ephemeral = ephemeral_ports()
    candidates = [port for port in range(10_000, 65_536) if port not in ephemeral]
    for port in random.sample(candidates, min(50, len(candidates))):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    return free_port(host)  # a machine whose whole range is ephemeral


def ensure_port_free(host: str, port: int, what: str) -> None:
    """Fails with a clear message when ``port`` is taken, before anything else starts."""
    if port != 0:
        reserve_port(host, port, what).close()


def reserve_port(host: str, port: int, what: str) -> socket.socket:
    """A socket bound to ``port`` with SO_REUSEADDR and not listening, which a server's listener with SO_REUSEADDR
    binds beside; fails with a clear message when the port is taken."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))
    except OSError as exc:
        s.close()
        raise StartupError(f"{what} port {host}:{port} is not available: {exc.strerror}") from None
    return s


def wait_until_port_free(host: str, port: int, what: str, timeout: float) -> None:
    """``ensure_port_free``, waiting up to ``timeout`` seconds for a holder that does not listen: a connection
    that was given the port as its own end while nothing listened there, which ends when its client gives up on
    it. A listener is another server, refused at once."""
    deadline = time.monotonic() + timeout
    logged = False
    while True:
        try:
            ensure_port_free(host, port, what)
            return
        except StartupError:
            if _listened(port) or time.monotonic() >= deadline:
                raise
        if not logged:
            log.warning("%s port %s:%d is held by a connection; waiting up to %.0f s", what, host, port, timeout)
            logged = True
        time.sleep(0.1)


def _listened(port: int) -> bool:
    """Whether a socket of this network namespace listens on ``port`` (state 0A of /proc/net/tcp)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def new_cluster_id() -> str:
    """A KRaft cluster id: every node of one cluster is formatted with the same."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if java is None or not os.access(java, os.X_OK):
        raise StartupError("the embedded Kafka broker needs Java 17 or later, and none was found: run `make setup`")
    return java


class EmbeddedBroker:
    """A single-node Apache Kafka whose files live in ``directory`` (``log/`` its data, ``kafka.log`` its log).
    With ``security``, its one client listener takes SCRAM users only (over TLS unless switched off).

    One node of a several-node cluster takes its controller port, the cluster's id and server ``settings`` over
    the defaults (``node.id``, ``controller.quorum.voters``, replication factors), and may run with other
    ``jvm_options`` (a small machine's garbage collector)."""

    def __init__(
        self,
        directory: Path,
        port: int = 0,
        host: str = "127.0.0.1",
        heap_mb: int = 1024,
        security: BrokerSecurity | None = None,
        *,
        controller_port: int = 0,
        cluster_id: str | None = None,
        settings: Mapping[str, str] | None = None,
        jvm_options: Sequence[str] = tuple(_JVM_OPTIONS),
    ) -> None:
        self.directory = directory
        self.host = host
        self.port = port
        self.heap_mb = heap_mb
        self.security = security
        self.controller_port = controller_port
        self.cluster_id = cluster_id
        self.settings = dict(settings or {})
        self.jvm_options = list(jvm_options)
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._lock: DataDirLock | None = None
        # Bound to the broker's port, never listening, from the first start to the stop. A port bound by a socket
        # is one connect() never gives a client as its own end, so no client retrying the port while the broker is
        # down connects to itself and takes it; Kafka's listener (SO_REUSEADDR too) binds beside it.
        self._port_keeper: socket.socket | None = None
        self._log_start = 0  # where this start's lines begin in kafka.log

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def client_config(self) -> dict[str, str]:
        """librdkafka settings that reach this broker as its own user (none without ``security``)."""
        return {} if self.security is None else client_settings(self.security, self.directory, self.host)

    @property
    def log_path(self) -> Path:
        return self.directory / "kafka.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self, timeout: float = 60.0) -> str:
        """Starts the broker and waits until it answers a metadata request."""
        self.wait_for_port(timeout)
        self.launch()
        self.wait_until_ready(timeout)
        return self.bootstrap_servers

    def wait_for_port(self, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for a connection holding the broker's port to end (see
        ``wait_until_port_free``); blocks, so call it from a thread other than the event loop's."""
        wait_until_port_free(self.host, self.port, "embedded Kafka broker", timeout)

    def launch(self) -> None:
        """Starts the child process; again after it exited, on the same port and in the same directory."""
        java = java_executable()
        classpath = jars_classpath("kafka")
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._lock is None:
            self._lock = DataDirLock.take(
                self.directory, "an embedded Kafka broker", "broker.lock", "the embedded Kafka broker's directory"
            )
        try:
            if self.port == 0:
                self.port = broker_port(self.host)
            if self._port_keeper is None:
                self._port_keeper = reserve_port(self.host, self.port, "embedded Kafka broker")
            else:  # a restart: no other server took the port meanwhile
                ensure_port_free(self.host, self.port, "embedded Kafka broker")
            config = self._write_config()
            jvm = [java, f"-Xms{min(64, self.heap_mb)}m", f"-Xmx{self.heap_mb}m", *self.jvm_options]
            jvm += [f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}", "-cp", classpath]
            if not (self.directory / "log" / "meta.properties").exists():
                self._format(jvm, config)
            self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            self._log_start = self._log_file.tell()
            self._process = spawn_tied(
                [*jvm, "kafka.Kafka", str(config)],
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # out of the terminal's process group: Ctrl-C reaches Hermes alone, which drains and commits and
                # then stops the broker (stopped first, it left every producer and consumer failing to reconnect)
                process_group=0,
            )
        except BaseException:
            self.stop()  # releases the directory
            raise

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0, **self.client_config()})
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                reason = self.failure_reason()
                self.stop()
                raise StartupError(f"the embedded Kafka broker exited at start-up: {reason}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.2).close()
                admin.list_topics(timeout=2)
            except Exception:  # not listening yet, or listening but not yet serving metadata
                time.sleep(0.05)
                continue
            log.info(
                "embedded Apache Kafka broker ready at %s (data in %s, log %s)",
                self.bootstrap_servers,
                self.directory / "log",
                self.log_path,
            )
            return
        self.stop()
        raise StartupError(f"the embedded Kafka broker was not ready within {timeout:.0f} s; see {self.log_path}")

    def collect_exit(self) -> int | None:
        """The exit status of a broker that exited (negative: the signal that killed it), which is reaped and can
        be launched again; None while it runs."""
        process = self._process
        if process is None or process.poll() is None:
            return None
        self._process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return process.returncode

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()  # a controlled shutdown: the log is closed cleanly, no recovery at the next start
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.warning("the embedded Kafka broker did not stop within %.0f s; killing it", STOP_TIMEOUT)
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._port_keeper is not None:
            self._port_keeper.close()
            self._port_keeper = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def pause(self) -> None:
        """Freezes the broker (SIGSTOP), to test outages."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def _write_config(self) -> Path:
        # alone, a static quorum of one whose address may change between starts; in a larger quorum, a fixed port
        controller_port = self.controller_port or broker_port(self.host)
        listener = "PLAINTEXT" if self.security is None else "CLIENT"
        settings = {
            **_SERVER_SETTINGS,
            "controller.quorum.voters": f"1@{self.host}:{controller_port}",
            "listeners": f"{listener}://{self.host}:{self.port},CONTROLLER://{self.host}:{controller_port}",
            "advertised.listeners": f"{listener}://{self.host}:{self.port}",
            "log.dirs": str(self.directory / "log"),
        }
        if self.security is not None:
            settings |= server_settings(self.security, self.directory, self.host)
        settings |= self.settings
        config = self.directory / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        (self.directory / "log4j2.properties").write_text(_LOG4J)
        return config

    def _format(self, jvm: list[str], config: Path) -> None:
        cluster_id = self.cluster_id or new_cluster_id()
        scram = format_arguments(self.security, self.directory) if self.security is not None else []
        result = subprocess.run(
            # "=": an id may begin with "-", which would read as an option
            [*jvm, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(config), *scram],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise StartupError(f"formatting the embedded Kafka broker's log directory failed: {last[0]}")
        log.info("formatted a new embedded Kafka log directory in %s", self.directory / "log")

    def failure_reason(self) -> str:
        """The broker's own words for why it stopped: the first ERROR line of this start's log."""
        if self._log_file is not None:
            self._log_file.flush()
        try:
            with open(self.log_path, "rb") as log_file:
                log_file.seek(self._log_start)
                lines = log_file.read().decode(errors="replace").splitlines()
        except OSError:
            return f"see {self.log_path}"
        errors = [line for line in lines if " ERROR " in line or "Exception" in line]
        if not errors:
            return f"see {self.log_path}"
        first = errors[0]
        if "Failed to acquire lock" in first:
            return f"its log directory is locked by another Kafka process ({first.strip()})"
        if "meta.properties" in first or "Invalid cluster.id" in first or "CorruptRecord" in first:
            return f"its log directory {self.directory / 'log'} looks damaged: {first.strip()} (see {self.log_path})"
        return f"{first.strip()} (see {self.log_path})"

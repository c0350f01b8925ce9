"""Running Hermes for tests: in this process (own loop, own thread) or as the real ``hermes run`` process,
plus a small client for the management and frontend APIs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web_app

from hermes.broker.embedded import broker_port, free_port
from hermes.children import spawn_tied
from hermes.config import Settings, flag, load_settings
from hermes.config_sections import commands_of
from hermes.consumers.process import ConsumerProcess
from hermes.runtime import ALL_ROLES, Hermes, Role
from tests.support.waiting import wait_until


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class InProcessHermes:
    """``Hermes`` started on a private event loop in a background thread."""

    def __init__(self, settings: Settings, roles: frozenset[Role] = ALL_ROLES) -> None:
        self.hermes = Hermes(settings, roles)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def call(self, coro: Any, timeout: float = 60) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> InProcessHermes:
        self._thread.start()
        self.call(self.hermes.start())
        return self

    def stop(self) -> None:
        try:
            self.call(self.hermes.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
            # aiohttp keeps every application that ran middlewares in a process-wide cache (aio-libs/aiohttp#9158),
            # and with it this Hermes and its Kafka clients: 40 pipes and 10 sockets per stopped Hermes.
            web_app._cached_build_middleware.cache_clear()

    def consumer(self, topic: str, name: str, within: float = 20) -> ConsumerProcess:
        """The subscription's consumer, once started (which must take less than ``within`` seconds)."""
        supervisor = self.hermes.supervisor
        assert supervisor is not None
        wait_until(lambda: (topic, name) in supervisor.consumers, timeout=within)
        return supervisor.consumers[(topic, name)]

    def suspend(self, client: HermesClient, topic: str, name: str) -> None:
        """Suspends the subscription and waits until its consumer has stopped (and committed)."""
        client.set_state(topic, name, "SUSPENDED")
        supervisor = self.hermes.supervisor
        assert supervisor is not None
        wait_until(lambda: (topic, name) not in supervisor.consumers, timeout=20)

    @property
    def management_url(self) -> str:
        return self.hermes.management_url

    @property
    def frontend_url(self) -> str:
        return self.hermes.frontend_url


# A crashed consumer node's partitions move on after this (the embedded broker allows down to 1000).
SESSION_TIMEOUT_MS = 2000
# The broker's ack, in ms, before a publish is answered 202 instead of 201: Hermes' 65 ms is missed now and then
# by a test machine whose two cores run Kafka, Hermes and the test at once. Tests of the 202 path pause the broker.
ACK_TIMEOUT_MS = 1000


def hermes_settings(data_dir: Path, bootstrap: str | None, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "frontend_port": 0,
        "management_port": 0,
        "kafka_bootstrap_servers": bootstrap,
        "metadata_poll_interval": 0.05,
        "consumer_session_timeout_ms": SESSION_TIMEOUT_MS,
        "frontend_ack_leader_timeout": ACK_TIMEOUT_MS,
        "consumer_commit_interval": 0.2,
        "consumer_metrics_interval": 0.2,
        "pipeline": False,  # Spark takes 10+ s to start: only the tests that want the pipeline run it
        **overrides,
    }
    return load_settings(values)


@contextlib.contextmanager
def own_hermes(data_dir: Path, bootstrap: str, **overrides: Any) -> Iterator[InProcessHermes]:
    """An ``InProcessHermes`` of the tests' settings (and ``overrides``), stopped at the end."""
    running = InProcessHermes(hermes_settings(data_dir, bootstrap, **overrides)).start()
    try:
        yield running
    finally:
        running.stop()


def thread_names() -> list[str]:
    """The OS's names of this process's threads (``/proc/self/task/*/comm``)."""
    names = []
    for comm in Path("/proc/self/task").glob("*/comm"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            names.append(comm.read_text().strip())
    return names


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] if Path(f"/proc/{pid}/stat").exists() else "X"
    return status not in ("Z", "X")  # a zombie has died; only its parent has not collected it yet


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().split(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


class HermesProcess:
    """The real ``hermes run`` (or another subcommand) as a child process on free ports."""

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        command: str = "run",
        env: dict[str, str] | None = None,
        pipeline: bool = False,
        kafka_port: int | None = None,
    ) -> None:
        self.frontend_port = free_port()
        self.management_port = free_port()
        self.pipeline_port = free_port()
        self.kafka_port = kafka_port or broker_port()  # of the embedded broker a `run` starts
        self.data_dir = data_dir
        self.log_path = data_dir / f"hermes-{command}.log"
        ports = {
            "frontend_port": self.frontend_port,
            "management_port": self.management_port,
            "pipeline_port": self.pipeline_port,
            "consumers_port": free_port(),
        }
        self.argv = [
            sys.executable,
            "-m",
            "hermes",
            command,
            "--data-dir",
            str(data_dir),
            *[arg for name, port in ports.items() if command in commands_of(name) for arg in (flag(name), str(port))],
            *([] if pipeline or command != "run" else ["--no-pipeline"]),  # Spark takes 10+ s to start
            *(["--embedded-broker-port", str(self.kafka_port)] if command == "run" else []),
            *args,
        ]
        self.env = {
            "HERMES_CONSUMER_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "HERMES_FRONTEND_ACK_LEADER_TIMEOUT": str(ACK_TIMEOUT_MS),
            **os.environ,
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.own_group = False

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    @property
    def frontend_url(self) -> str:
        return f"http://127.0.0.1:{self.frontend_port}"

    def start(self, wait_for: str = "management", timeout: float = 180, own_group: bool = False) -> HermesProcess:
        """``own_group``: in a process group of its own, as a shell runs a command (see ``interrupt``). ``timeout``
        bounds the wait for its health on a loaded machine (a `run` starts a Kafka broker): quiet, it takes seconds."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.own_group = own_group
        with open(self.log_path, "ab") as log:
            self.process = spawn_tied(  # no Hermes (and its broker) left behind by a test run killed midway
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, process_group=0 if own_group else None
            )
        if wait_for == "nothing":  # a role without an HTTP server: just make sure it did not exit at once
            time.sleep(1.0)
            if self.process.poll() is not None:
                self.kill()  # what it started in its group
                raise AssertionError(f"hermes exited with {self.process.returncode}:\n{self.log()}")
            return self
        urls = [self.management_url if wait_for == "management" else self.frontend_url]
        if self.argv[3] == "run" and wait_for == "management":  # its frontend may open its port a moment later
            urls.append(self.frontend_url)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.kill()  # what it started in its group
                raise AssertionError(f"hermes exited with {self.process.returncode}:\n{self.log()}")
            try:
                if all(httpx.get(f"{url}/status/health", timeout=1).status_code == 200 for url in urls):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()  # a failed start must not leave a hermes (and its broker) running after the test
        raise AssertionError(f"hermes did not become healthy in {timeout} s:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL to it, and to its whole group when it has one of its own (a frontend's workers, a Spark JVM)."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):  # a group whose every process has exited
            if self.own_group:  # even when its first process has exited already
                os.killpg(self.process.pid, signal.SIGKILL)
            elif self.process.poll() is None:
                self.process.kill()
        self.process.wait(30)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def interrupt(self, timeout: float = 30) -> int:
        """Ctrl-C in a terminal: SIGINT to every process of the group (started with ``own_group``)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Its exit code; one that does not exit in time fails with its log and where its threads are (SIGUSR1)."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            stacks = self.log()[-20_000:]
            raise AssertionError(f"hermes did not exit within {timeout} s of signal {sig}:\n{stacks}") from None


class HermesClient:
    """The management and frontend APIs over HTTP, with builders for test entities."""

    def __init__(self, management_url: str, frontend_url: str) -> None:
        self.management = httpx.Client(base_url=management_url, timeout=30)
        self.frontend = httpx.Client(base_url=frontend_url, timeout=30)

    def close(self) -> None:
        self.management.close()
        self.frontend.close()

    def create_group(self, name: str | None = None) -> str:
        name = name or unique("g")
        response = self.management.post("/groups", json={"groupName": name})
        assert response.status_code == 201, response.text
        return name

    def create_topic(self, name: str | None = None, **fields: Any) -> str:
        if name is None:
            name = f"{self.create_group()}.{unique('topic')}"
        body = {
            "name": name,
            "description": "test topic",
            "owner": {"source": "Plaintext", "id": "tests"},
            "contentType": "JSON",
            **fields,
        }
        response = self.management.post("/topics", json=body)
        assert response.status_code == 201, response.text
        return name

    def create_subscription(self, topic: str, endpoint: str, name: str | None = None, **fields: Any) -> str:
        name = name or unique("sub")
        body = {
            "topicName": topic,
            "name": name,
            "endpoint": endpoint,
            "description": "test subscription",
            "owner": {"source": "Plaintext", "id": "tests"},
            **fields,
        }
        response = self.management.post(f"/topics/{topic}/subscriptions", json=body)
        assert response.status_code == 201, response.text
        return name

    def set_state(self, topic: str, name: str, state: str) -> None:
        path = f"/topics/{topic}/subscriptions/{name}/state"
        response = self.management.put(path, content=f'"{state}"', headers={"Content-Type": "application/json"})
        assert response.status_code == 200, response.text

    def publish(self, topic: str, body: bytes | str, headers: dict[str, str] | None = None) -> httpx.Response:
        content = body.encode() if isinstance(body, str) else body
        return self.frontend.post(
            f"/topics/{topic}", content=content, headers={"Content-Type": "application/json", **(headers or {})}
        )

"""The system under test, as in production: the broker, and management, frontend and consumers each in its own
``hermes`` process (``hermes run`` would share one event loop and GIL between the roles)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from hermes.bench.load import Sink
from hermes.broker.embedded import EmbeddedBroker, broker_port, free_port
from hermes.children import spawn_tied

_T = TypeVar("_T")


def wait_for_port(port: int, process: subprocess.Popen[bytes] | None = None, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def child(argv: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A child process that serves ``port``; stopped (SIGTERM, then SIGKILL) when the block ends."""
    process = spawn_tied(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def run_ports() -> dict[str, int]:
    """A port for each ``--ROLE-port`` flag of a ``hermes run`` that must start beside other runs on this machine:
    free ones for the APIs the scenario calls, one outside the ephemeral range for the embedded broker (one in it
    can be taken by a client's own end of a connection, ``broker_port``), and 0 (any free) for the pipeline's
    status port, whose default (8060) a second run at once found taken and exited."""
    return {"management": free_port(), "frontend": free_port(), "embedded-broker": broker_port(), "pipeline": 0}


def port_flags(ports: dict[str, int]) -> list[str]:
    return [arg for role, port in ports.items() for arg in (f"--{role}-port", str(port))]


def memory_kib(pid: int) -> dict[str, int]:
    """Resident memory now (VmRSS) and its peak (VmHWM) of a process, in KiB (Linux)."""
    out = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process used so far (Linux). Per-request CPU is a steadier figure than
    throughput on a machine shared with other work: it does not depend on how much CPU the process got."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return _stat_cpu_seconds(stat.read())
    except OSError:
        return 0.0


def _stat_cpu_seconds(stat: str) -> float:
    """User plus system time from the text of a /proc ``stat`` file (of a process or of one of its threads)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """``cpu_seconds`` of a process by thread name (Linux; a name's digits read as N, so a pool's threads add up)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for thread in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{thread}/stat") as stat:
                text = stat.read()
                name = re.sub(r"[0-9]+", "N", text[text.index("(") + 1 : text.rindex(")")])
                out[name] = out.get(name, 0.0) + _stat_cpu_seconds(text)
    return out


def tree_cpu_seconds(pid: int) -> float:
    """``cpu_seconds`` of a process and its children, recursively (the workers of ``hermes frontend``)."""
    total = cpu_seconds(pid)
    with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{pid}/children") as children:
        total += sum(tree_cpu_seconds(int(child)) for child in children.read().split())
    return total


class System:
    """Broker and the three ``hermes`` role processes, with a small management client."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.broker = EmbeddedBroker(data_dir / "kafka")
        self.ports = {role: free_port() for role in ("management", "frontend", "consumers")}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._stack = contextlib.ExitStack()

    @property
    def frontend(self) -> str:
        return f"http://127.0.0.1:{self.ports['frontend']}"

    @property
    def management(self) -> str:
        return f"http://127.0.0.1:{self.ports['management']}"

    def __enter__(self) -> System:
        self.broker.start()
        self._stack.callback(self.broker.stop)
        try:
            for role in ("management", "frontend", "consumers"):  # management first: it creates shared topics
                self.processes[role] = self._stack.enter_context(child(self._argv(role), self.ports[role]))
        except BaseException:
            self._stack.close()
            raise
        return self

    def _argv(self, role: str, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "hermes",
            role,
            "--data-dir",
            str(self.data_dir),
            "--kafka-bootstrap-servers",
            self.broker.bootstrap_servers,
            f"--{role}-port",
            str(self.ports[role]),
            "--log-level",
            "WARNING",
            "--metadata-poll-interval",
            "0.2",
            *(("--workers", "1") if role == "frontend" and not extra else extra),
        ]

    @contextlib.contextmanager
    def frontend_workers(self, workers: int) -> Iterator[subprocess.Popen[bytes]]:
        """The frontend as ``hermes frontend --workers N`` on the same port while the block runs (its
        master process is yielded), then the one-process frontend again."""
        with self.frontend_with("--workers", str(workers)) as master:
            time.sleep(1.0)  # every worker listening, not only the first
            yield master

    @contextlib.contextmanager
    def frontend_with(self, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
        """The frontend started with ``flags`` (and this process's environment as it is now) on the same port
        while the block runs, then the one-process frontend again."""
        first = self.processes["frontend"]
        first.terminate()
        first.wait(30)
        try:
            with child(self._argv("frontend", *flags), self.ports["frontend"]) as process:
                yield process
        finally:
            self.processes["frontend"] = self._stack.enter_context(
                child(self._argv("frontend"), self.ports["frontend"])
            )

    @contextlib.contextmanager
    def frontend_beside(self, *flags: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
        """Another frontend started with ``flags`` (and this process's environment as it is now) on a port of its
        own, beside the running one, while the block runs: the process and its URL. Its data directory is its own
        (a frontend's journal and lock), with links to the shared one's files: the SQLite metadata, its key."""
        port = free_port()
        own = self.data_dir / f"frontend-{port}"
        own.mkdir(mode=0o700)
        for entry in self.data_dir.iterdir():
            if entry.is_file() and entry.suffix != ".lock":  # hermes.lock: each frontend takes its own
                (own / entry.name).symlink_to(entry)
        argv = self._argv("frontend", *flags)
        argv[argv.index("--data-dir") + 1] = str(own)
        argv[argv.index("--frontend-port") + 1] = str(port)
        with child(argv, port) as process:
            yield process, f"http://127.0.0.1:{port}"

    def __exit__(self, *_: object) -> None:
        self._stack.close()

    def memory(self) -> dict[str, dict[str, int]]:
        """Each role's and the broker's (the Java process) resident memory and its peak."""
        broker = memory_kib(self.broker.pid) if self.broker.pid is not None else {}
        return {**{role: memory_kib(p.pid) for role, p in self.processes.items()}, "broker": broker}


class Management:
    """The few management calls the scenarios need."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self._session = session
        self._url = url

    async def _call(self, method: str, path: str, body: Any = None) -> None:
        async with self._session.request(method, self._url + path, json=body) as response:
            text = await response.text()
            exists = method == "POST" and response.status == 400 and "ALREADY_EXISTS" in text
            if response.status >= 300 and not exists:
                raise RuntimeError(f"{method} {path}: {response.status} {text}")

    async def topic(self, group: str, name: str, **fields: Any) -> str:
        await self._call("POST", "/groups", {"groupName": group})
        qualified = f"{group}.{name}"
        await self._call("POST", "/topics", {"name": qualified, "owner": {"id": "bench"}, **fields})
        return qualified

    async def subscription(self, topic: str, name: str, endpoint: str, **policy: Any) -> None:
        body = {
            "name": name,
            "endpoint": endpoint,
            "owner": {"id": "bench"},
            "subscriptionPolicy": {"inflightSize": 100, "rate": 100_000, "requestTimeout": 10_000, **policy},
        }
        await self._call("POST", f"/topics/{topic}/subscriptions", body)

    async def batch_subscription(self, topic: str, name: str, endpoint: str, **policy: Any) -> None:
        body = {"name": name, "endpoint": endpoint, "owner": {"id": "bench"}, "deliveryType": "BATCH"}
        body["subscriptionPolicy"] = policy
        await self._call("POST", f"/topics/{topic}/subscriptions", body)

    async def state(self, topic: str, name: str, state: str) -> None:
        await self._call("PUT", f"/topics/{topic}/subscriptions/{name}/state", state)

    async def remove_subscription(self, topic: str, name: str) -> None:
        await self._call("DELETE", f"/topics/{topic}/subscriptions/{name}")


async def warm_up(frontend: str, topic: str, sink: Any, names: list[str], within: float = 90.0) -> bool:
    """Publishes probe messages until every subscription in ``names`` received one (its consumer joined its
    group and reads from the end), then forgets the probes. False if some never did ``within`` seconds."""
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            async with session.post(
                f"{frontend}/topics/{topic}", data=b'{"probe":1}', headers={"Content-Type": "application/json"}
            ) as r:
                await r.read()
            if all(sink.arrivals.get(n) for n in names):
                await asyncio.sleep(0.5)  # let the last probes land before forgetting them
                for n in names:
                    sink.arrivals.pop(n, None)
                return True
            await asyncio.sleep(0.5)
    return False


async def run_alone(scenario: Callable[[System, Sink, Management], Awaitable[_T]]) -> _T:
    """One scenario on a system of its own (``python -m hermes.bench.<module>``): a fresh data directory, a sink
    for its subscriptions and a management client, all stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="hermes-bench-") as data, System(Path(data)) as system:
        sink = Sink()
        await sink.start()
        try:
            async with aiohttp.ClientSession() as session:
                return await scenario(system, sink, Management(session, system.management))
        finally:
            await sink.stop()


def print_pairs_alone(
    run: Callable[[int], Coroutine[Any, Any, dict[str, Any]]],
    pairs: int,
    markdown: Callable[[dict[str, Any]], list[str]],
) -> None:
    """A scenario of pairs of phases run alone (``python -m hermes.bench.<module> [PAIRS]``): its JSON, the load
    average at its start and end, and its Markdown."""
    began = [round(x, 2) for x in os.getloadavg()]
    result = asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else pairs))
    print(json.dumps(result, indent=2))
    print(f"\nLoad average: {began} at the start, {[round(x, 2) for x in os.getloadavg()]} at the end.")
    print("\n".join(markdown(result)))

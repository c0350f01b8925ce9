"""``hermes frontend --workers N``: N processes publishing on one port, each with its own producer and journal.

The master takes the data directory's lock and the port, then starts the workers (``python -m
hermes.frontend.workers``). Each worker inherits the lock's file (so the lock is held, by the same owner, as long
as any of them lives), reads its settings from its standard input and listens on the port with SO_REUSEPORT: the
kernel spreads the connections among the workers. A worker stops when the master goes away (its standard input
ends); the master starts a worker again when it dies, and stops them all on SIGINT or SIGTERM. The workers
write their metrics to one directory, each scrape answering for all of them (``hermes.frontend.publish_metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
from typing import Any

import orjson
from prometheus_client import multiprocess
from pydantic import SecretStr

from hermes import event_loop
from hermes.config import Settings
from hermes.datadir import DataDirLock
from hermes.errors import HermesError, StartupError
from hermes.frontend.publish_metrics import MULTIPROCESS_DIR_VARIABLE
from hermes.logs import configure_logging, log_path
from hermes.runtime import Role, check_data_dir, serve

log = logging.getLogger(__name__)

_RESTART_DELAY = 1.0
_METRICS_DIR = "frontend-metrics"


def run_workers(settings: Settings) -> int:
    """The master: runs until SIGINT or SIGTERM; 1 when a worker could not start."""
    check_data_dir(settings)
    lock = DataDirLock.take(settings.data_dir, "hermes frontend")
    try:
        metrics = settings.data_dir / _METRICS_DIR
        shutil.rmtree(metrics, ignore_errors=True)  # an earlier run's counters: this run's start from 0
        metrics.mkdir()
        with _reserve(settings.host, settings.frontend_port) as port:
            settings = settings.model_copy(update={"frontend_port": port})
            return asyncio.run(_supervise(settings, lock.fileno(), str(metrics)))
    finally:
        lock.release()


@contextlib.contextmanager
def _reserve(host: str, port: int) -> Any:
    """The port (a free one for 0), bound without listening for as long as the workers run: held for them."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise StartupError(f"frontend port {host}:{port} is not available: {exc.strerror}") from None
        yield int(sock.getsockname()[1])


class _Worker:
    def __init__(self, index: int, settings: Settings, lock_fd: int, metrics_dir: str) -> None:
        self.index = index
        self._settings = settings
        self._lock_fd = lock_fd
        self._metrics_dir = metrics_dir
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Starts the worker and waits until it serves; StartupError if it exits first (it said why on stderr)."""
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hermes.frontend.workers",
            str(self.index),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            pass_fds=(self._lock_fd,),
            env={**os.environ, MULTIPROCESS_DIR_VARIABLE: self._metrics_dir},
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(_settings_line(self._settings))  # the pipe stays open: the worker's lifeline
        if await self.process.stdout.readline() != b"ready\n":
            code = await self.process.wait()
            raise StartupError(f"frontend worker {self.index} exited with {code} while starting")

    async def keep_running(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            assert self.process is not None
            code = await self.process.wait()
            if stop.is_set():
                return
            # its gauges go: it holds nothing now
            multiprocess.mark_process_dead(self.process.pid, self._metrics_dir)  # type: ignore[no-untyped-call]
            log.error(
                "frontend worker %d (pid %d) exited with %s; starting it again", self.index, self.process.pid, code
            )
            await asyncio.sleep(_RESTART_DELAY)
            with contextlib.suppress(StartupError):
                await self.start()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            await self.process.wait()


async def _supervise(settings: Settings, lock_fd: int, metrics_dir: str) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    workers = [_Worker(i, settings, lock_fd, metrics_dir) for i in range(settings.workers)]
    try:
        try:
            await asyncio.gather(*(worker.start() for worker in workers))
        except StartupError as exc:
            log.error("%s", exc)
            return 1
        pids = ", ".join(str(w.process.pid) for w in workers if w.process is not None)
        log.info(
            "hermes frontend is running (pid %d) with %d workers (pids %s) on %s://%s:%d; Ctrl-C stops it",
            os.getpid(),
            len(workers),
            pids,
            "https" if settings.tls_cert_file is not None else "http",
            settings.host,
            settings.frontend_port,
        )
        watchers = [asyncio.create_task(worker.keep_running(stop)) for worker in workers]
        await stop.wait()
        log.info("shutting down")
        for watcher in watchers:
            watcher.cancel()
        return 0
    finally:
        await asyncio.gather(*(worker.stop() for worker in workers))


def _settings_line(settings: Settings) -> bytes:
    """The settings as one JSON line, secrets included (a pipe to the worker: nothing prints them)."""
    values = {
        name: value.get_secret_value() if isinstance(value, SecretStr) else value
        for name, value in settings.model_dump().items()
    }
    return orjson.dumps(values, default=str) + b"\n"


def _worker_main() -> None:
    index = int(sys.argv[1])
    settings = Settings(**orjson.loads(sys.stdin.buffer.readline()))
    # each worker reports its topics' publish rates under a name of its own, which the management API sums
    settings = settings.model_copy(update={"node_id": f"{settings.node_id}-{index}"})
    configure_logging(settings.log_level, log_path(settings.data_dir, f"frontend-{index}"))
    try:
        event_loop.run(settings.event_loop, serve(settings, frozenset({Role.FRONTEND}), worker=True))
    except HermesError as exc:
        print(f"hermes: {exc.message}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    _worker_main()

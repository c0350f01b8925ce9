"""The embedded broker as ``hermes run`` runs it: a child process, started again whenever it exits (reaped, logged
with its exit status, after a backoff); ``problem`` says it is down meanwhile, for the process's health."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from hermes.broker.embedded import EmbeddedBroker
from hermes.errors import StartupError
from hermes.tasks import cancel

log = logging.getLogger(__name__)

_MAX_BACKOFF = 60.0
_STABLE = 60.0  # a broker that ran this long before exiting is started again after the first backoff
_POLL = 0.5  # seconds between checks of the child (a waitpid that does not block)
# A connection holding the broker's port lasts until its client gives up on it (librdkafka: within a minute), then
# 60 s more in TIME_WAIT, which holds the port too (it was not bound with SO_REUSEADDR)
PORT_TIMEOUT = 150.0
READY_TIMEOUT = 60.0


def exit_status(code: int) -> str:
    """An exit status as people read it: "code 1", or "signal SIGKILL" for a negative one."""
    if code >= 0:
        return f"code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


class BrokerChild:
    def __init__(self, broker: EmbeddedBroker, backoff: float, poll: float = _POLL) -> None:
        self.broker = broker
        self._backoff = backoff
        self._poll = poll
        self._watcher: asyncio.Task[None] | None = None
        self.problem: str | None = None  # None while the broker runs

    async def start(self) -> None:
        """The first start: a failure is Hermes' failure to start."""
        await self._start_broker()
        self._watcher = asyncio.create_task(self._watch(), name="embedded-broker-watch")

    async def stop(self) -> None:
        await cancel(self._watcher)
        self._watcher = None
        await asyncio.to_thread(self.broker.stop)

    async def _start_broker(self) -> None:
        broker = self.broker
        await asyncio.to_thread(broker.wait_for_port, PORT_TIMEOUT)
        broker.launch()
        await asyncio.to_thread(broker.wait_until_ready, READY_TIMEOUT)

    async def _watch(self) -> None:
        restarts = 0  # in a row, each exiting within _STABLE seconds of its start
        started = time.monotonic()
        while True:
            await asyncio.sleep(self._poll)
            code = self.broker.collect_exit()
            if code is None:
                continue
            down = time.monotonic()
            self.problem = f"the embedded Kafka broker exited with {exit_status(code)}; starting it again"
            log.error("the embedded Kafka broker exited with %s: %s", exit_status(code), self.broker.failure_reason())
            while True:
                if time.monotonic() - started >= _STABLE:
                    restarts = 0
                delay = min(_MAX_BACKOFF, self._backoff * 2**restarts)
                restarts += 1
                log.warning("starting the embedded Kafka broker again in %.1f s", delay)
                await asyncio.sleep(delay)
                started = time.monotonic()
                try:
                    await self._start_broker()
                except (StartupError, OSError) as exc:
                    log.error("the embedded Kafka broker did not start again: %s", exc)
                    continue
                break
            self.problem = None
            log.warning(
                "the embedded Kafka broker runs again (pid %s), %.1f s after it exited",
                self.broker.pid,
                time.monotonic() - down,
            )

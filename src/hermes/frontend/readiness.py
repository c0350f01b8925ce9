"""Whether the frontend can take messages, for ``/status/ready``: checked in the background, as Hermes' readiness
checker does, so the route answers from memory. The topic cache is loaded before the publishing port opens; what
can come and go is the broker. The process's ``Health`` names what is down (under ``hermes run``, the embedded
broker), for ``/status/health`` too."""

from __future__ import annotations

import asyncio

from hermes.broker.producer import BrokerProducer
from hermes.http.status import Health
from hermes.tasks import cancel

# Seconds between broker checks, and how long one waits for the broker's answer.
_INTERVAL = 2.0
_TIMEOUT = 2.0


class Readiness:
    def __init__(self, producer: BrokerProducer, interval: float = _INTERVAL, health: Health | None = None) -> None:
        self._producer = producer
        self._interval = interval
        self.health = health or Health()
        self._task: asyncio.Task[None] | None = None
        self.ready = False

    async def start(self) -> None:
        """Checks once (the port opens ready when the broker is), then every ``interval`` seconds."""
        await self._check()
        self._task = asyncio.create_task(self._run(), name="frontend-readiness")

    async def _check(self) -> None:
        self.ready = await asyncio.to_thread(self._producer.reachable, _TIMEOUT)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self._check()

    async def stop(self) -> None:
        self.ready = False
        await cancel(self._task)

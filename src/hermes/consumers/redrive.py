"""A subscription's dead-letter redrives (``hermes.domain.redrive``), run by its consumer: the dead letters a
redrive selects are read from the dead-letter topic in order and delivered again to this subscription only, as
its SERIAL or BATCH consumer delivers (filters, rate, retries until messageTtl; one that fails again is discarded,
so it becomes a new dead letter, beyond the redrive's range).

SERIAL: up to ``inflightSize`` at once, and with ``ordering: KEY`` a key's messages one after another in the order
of their dead letters; BATCH: in batches of up to ``batchSize``, one at a time. The redrive's ``position`` (every
dead letter below it is done with) is written back every ``PROGRESS_INTERVAL`` seconds and at the end: after a
crash the next run goes on from there, so a message is sent again only if it was sent after the last write (the
at-least-once window).

One consumer runs a redrive: it claims it by writing its node id as ``runner`` (and reading it back); a redrive
whose runner wrote nothing for ``LEASE_MS`` (its node died, or the subscription moved) is taken over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from hermes.broker.records import read_records
from hermes.consumers.delivery import Delivery
from hermes.domain.dead_letter import DeadLetter, dead_letter_topic
from hermes.domain.message import Message
from hermes.domain.redrive import Redrive, RedriveStatus
from hermes.domain.subscription import Ordering
from hermes.errors import HermesError
from hermes.metadata.documents import DEAD_LETTER_REDRIVES
from hermes.metadata.repository import until_reachable
from hermes.tasks import cancel

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 0.5
LEASE_MS = 15_000
_CHUNK = 200  # dead letters read at once
_CLAIM_CHECK = 0.2  # seconds between a claim and reading it back
_RETRY = 1.0  # seconds before a failed redrive is taken up again

Redeliver = Callable[[list[Message]], Awaitable[None]]


def _now() -> int:
    return int(time.time() * 1000)


class Redrives:
    def __init__(self, delivery: Delivery, redeliver: Redeliver) -> None:
        self._delivery = delivery
        self._redeliver = redeliver
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def _name(self) -> str:
        return self._delivery.name

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"redrives-{self._name}")

    def requested(self) -> None:
        """A redrive of this subscription was written, or one is unfinished (since before a restart)."""
        self._wake.set()

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                while (redrive := await self._next()) is not None:
                    await self._redrive(redrive)
            except HermesError as exc:
                log.warning("redriving dead letters of %s failed, trying again: %s", self._name, exc.message)
                self._wake_in(_RETRY)
            except Exception:
                log.exception("redriving dead letters of %s failed, trying again", self._name)
                self._wake_in(_RETRY)

    def _wake_in(self, seconds: float) -> None:
        asyncio.get_running_loop().call_later(seconds, self._wake.set)

    async def _next(self) -> Redrive | None:
        """The oldest unfinished redrive of the subscription, claimed; None when there is none, or when another
        consumer runs it (then this one looks again once its lease could have ended)."""
        repository, me = self._delivery.context.repository, self._delivery.context.node_id
        documents = await until_reachable(repository.list_documents, DEAD_LETTER_REDRIVES)
        mine = sorted(
            (Redrive.from_document(d) for k, d in documents.items() if k.startswith(f"{self._name}/")),
            key=lambda r: r.id,
        )
        redrive = next((r for r in mine if not r.finished), None)
        if redrive is None:
            return None
        if redrive.runner not in (None, me) and _now() - redrive.updatedAt < LEASE_MS:
            self._wake_in(LEASE_MS / 1000)
            return None
        claimed = replace(redrive, runner=me, status=RedriveStatus.RUNNING, updatedAt=_now())
        await until_reachable(repository.put_document, DEAD_LETTER_REDRIVES, claimed.key, claimed.to_document())
        await asyncio.sleep(_CLAIM_CHECK)
        again = await until_reachable(repository.get_document, DEAD_LETTER_REDRIVES, claimed.key)
        if again is None or again.get("runner") != me:  # deleted, or another consumer claimed it last
            self._wake_in(LEASE_MS / 1000)
            return None
        log.info("redriving dead letters %d to %d of %s (%s)", redrive.position, redrive.end, self._name, redrive.id)
        return claimed

    async def _redrive(self, redrive: Redrive) -> None:
        run = _Run(self._delivery, self._redeliver, redrive)
        try:
            await run.all()
        finally:
            await run.cancel()


class _Run:
    """One run of a redrive, from its position."""

    def __init__(self, delivery: Delivery, redeliver: Redeliver, redrive: Redrive) -> None:
        self._delivery = delivery
        self._redeliver = redeliver
        self.redrive = redrive
        self._read_to = redrive.position  # the next dead letter to read
        self._redriven = redrive.redriven
        self._unfinished: set[int] = set()  # offsets of dead letters being redriven
        self._tasks: set[asyncio.Task[None]] = set()
        self._by_key: dict[bytes, asyncio.Task[None]] = {}  # with ordering KEY: each key's last redelivery
        self._ended = asyncio.Event()

    async def all(self) -> None:
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            await self._all()
        finally:  # not cancelled: a write it left running could land after the last one
            self._ended.set()
            await heartbeat
        await self._write(done=True)
        log.info("redrove %d dead letters of %s (%s)", self._redriven, self._delivery.name, self.redrive.id)

    async def _heartbeat(self) -> None:
        """Writes the position every ``PROGRESS_INTERVAL``, also while a delivery waits for its retries: the
        runner's lease."""
        while True:
            try:
                async with asyncio.timeout(PROGRESS_INTERVAL):
                    await self._ended.wait()
                return
            except TimeoutError:
                await self._write()

    async def _all(self) -> None:
        subscription = self._delivery.subscription
        topic = dead_letter_topic(subscription.qualified_name)
        connection = self._delivery.context.connection
        while self._read_to < self.redrive.end:
            records = await asyncio.to_thread(
                read_records, connection, topic, 0, self._read_to, self.redrive.end, _CHUNK
            )
            if not records:  # purged meanwhile
                break
            letters = [
                letter
                for record in records
                if (letter := DeadLetter.from_record(record.offset, record.key, record.value, record.headers))
                and self.redrive.selects(letter)
            ]
            if self._delivery.subscription.is_batch:
                await self._batches(letters)
            else:
                for letter in letters:
                    await self._start(letter)
            self._read_to = records[-1].offset + 1
        while self._tasks:
            await self._wait()

    async def _batches(self, letters: list[DeadLetter]) -> None:
        size = self._delivery.subscription.batch_policy.batch_size
        for i in range(0, len(letters), size):
            chunk = letters[i : i + size]
            self._unfinished.update(letter.id for letter in chunk)
            await self._redeliver([letter.message() for letter in chunk])
            self._unfinished.difference_update(letter.id for letter in chunk)
            self._read_to = chunk[-1].id + 1
            self._count(len(chunk))

    async def _start(self, letter: DeadLetter) -> None:
        while len(self._tasks) >= self._delivery.subscription.serial_policy.inflight_limit:
            await self._wait()
        by_key = self._delivery.subscription.serial_policy.ordering is Ordering.KEY and letter.key is not None
        before = self._by_key.get(letter.key) if by_key and letter.key is not None else None
        self._read_to = letter.id  # those before it are started or not selected
        self._unfinished.add(letter.id)
        task = asyncio.create_task(self._one(letter, before))
        self._tasks.add(task)
        if by_key and letter.key is not None:
            self._by_key[letter.key] = task

    async def _one(self, letter: DeadLetter, before: asyncio.Task[None] | None) -> None:
        if before is not None:
            await asyncio.wait([before])  # the key's earlier message first
        await self._redeliver([letter.message()])
        self._unfinished.discard(letter.id)
        self._count(1)

    def _count(self, redriven: int) -> None:
        self._redriven += redriven
        self._delivery.metrics.count("redriven", redriven)

    async def _wait(self) -> None:
        done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            self._tasks.discard(task)
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        for key in [k for k, t in self._by_key.items() if t.done()]:
            del self._by_key[key]

    async def _write(self, done: bool = False) -> None:
        position = min(self._unfinished) if self._unfinished else self._read_to
        self.redrive = self.redrive.progressed(position, self._redriven, _now(), done)
        repository = self._delivery.context.repository
        await until_reachable(
            repository.put_document, DEAD_LETTER_REDRIVES, self.redrive.key, self.redrive.to_document()
        )

    async def cancel(self) -> None:
        """Stops what is under way (stopped, or the run failed): those messages stay after ``position``."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)

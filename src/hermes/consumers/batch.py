"""BATCH delivery: messages are aggregated into a JSON array and sent as one request.

A batch is sent when it holds ``batchSize`` messages, its bodies reach ``batchVolume`` bytes, or ``batchTime``
ms passed since its first message, whichever comes first. One batch is in flight at a time, so batches (and
the messages of every partition) arrive in order. A batch is retried as a whole with the batch policy; its
offsets are finished only when it was delivered or discarded. A single message larger than ``batchVolume``
is sent alone rather than dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

from hermes.consumers.consumer import ConsumerContext, CrashListener, SerialConsumer
from hermes.consumers.retry import Backoff, judge
from hermes.consumers.sender.result import SendResult
from hermes.domain.message import BATCH_ID_HEADER, Message
from hermes.domain.subscription import Subscription
from hermes.errors import EndpointResolutionError
from hermes.tracking import TraceStatus

log = logging.getLogger(__name__)

MESSAGE_IDS_HEADER = "Hermes-Message-Ids"


@dataclass
class Batch:
    messages: list[tuple[Message, int]]  # with the generation each was read in
    volume: int
    started: float

    @property
    def body(self) -> bytes:
        return b"[" + b",".join(m.body for m, _ in self.messages) + b"]"


class BatchConsumer(SerialConsumer):
    def __init__(
        self, subscription: Subscription, context: ConsumerContext, on_crash: CrashListener | None = None
    ) -> None:
        super().__init__(subscription, context, on_crash)
        self._queue: asyncio.Queue[tuple[Message, int]] = asyncio.Queue()
        self._batcher: asyncio.Task[None] | None = None
        self._carry: tuple[Message, int] | None = None

    async def start(self) -> None:
        await super().start()
        self._batcher = asyncio.create_task(self._run_batches(), name=f"batches-{self.name}")
        self._batcher.add_done_callback(self._batcher_done)

    def _batcher_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("batching of %s crashed", self.name, exc_info=error)
            self._crashed(error)

    async def stop(self, drain_timeout: float = 5.0) -> None:
        if self._batcher is not None:
            self._batcher.cancel()  # an unfinished batch stays uncommitted: it comes again after a restart
            await asyncio.wait([self._batcher])
        await super().stop(drain_timeout)

    def _capacity(self) -> int:
        return 2 * self.subscription.batch_policy.batch_size

    def _refill_at(self) -> int:
        return 1

    def _byte_budget(self) -> int | None:
        return None  # bounded by twice the batch size, and each batch by batchVolume

    def _dispatch(self, messages: list[Message], generation: int) -> None:
        for message in messages:
            self._queue.put_nowait((message, generation))

    def _finish(self, message: Message, generation: int) -> None:
        super()._finish(message, generation)
        self._finished.set()

    async def _run_batches(self) -> None:
        while True:
            batch = await self._collect()
            if batch.messages:
                await self._deliver_batch(batch)

    async def _collect(self) -> Batch:
        if self._carry is not None:
            (message, generation), self._carry = self._carry, None
        else:
            message, generation = await self._queue.get()
        batch = Batch([], 0, time.monotonic())
        while True:
            policy = self.subscription.batch_policy
            if generation == self._generation:
                if self._filters and not self._filters.passes(message):
                    self.metrics.count("filtered")
                    self._finish(message, generation)
                elif batch.messages and batch.volume + message.size > policy.batch_volume:
                    self._carry = (message, generation)  # starts the next batch, ahead of everything queued
                    return batch
                else:
                    batch.messages.append((message, generation))
                    batch.volume += message.size
                    self._trace(message, TraceStatus.INFLIGHT)
            if len(batch.messages) >= policy.batch_size or batch.volume >= policy.batch_volume:
                return batch
            remaining = batch.started + policy.batch_time / 1000 - time.monotonic()
            if remaining <= 0:
                return batch
            try:
                message, generation = await asyncio.wait_for(self._queue.get(), remaining)
            except TimeoutError:
                return batch

    async def _deliver_batch(self, batch: Batch) -> None:
        batch_id = str(uuid.uuid4())
        retries = 0
        while True:
            sub = self.subscription
            policy = sub.batch_policy
            result, url = await self._send(sub, batch, batch_id, retries)
            verdict = judge(result, policy.retry_client_errors)
            self._attempted(result, url)
            if not verdict.retry:
                for message, _ in batch.messages:
                    self.metrics.count("delivered")
                    self._trace(message, TraceStatus.SUCCESS)
                break
            backoff = Backoff(policy.message_backoff / 1000, 1.0, policy.message_backoff / 1000).delay(
                retries, result.retry_after
            )
            if backoff > self._ttl_left(batch.started):
                for message, _ in batch.messages:
                    await self._discard(message, result.description)
                break
            for message, _ in batch.messages:
                self._trace(message, TraceStatus.FAILED, result.description)
            retries += 1
            await self._backoff(backoff)
        for message, generation in batch.messages:
            self._finish(message, generation)

    async def _send(
        self, sub: Subscription, batch: Batch, batch_id: str, retries: int
    ) -> tuple[SendResult, str | None]:
        """The result, and the address it came from (None when there was none to send to)."""
        first = batch.messages[0][0]
        headers = self._context.sender.headers(sub, first, retries, "application/json")
        headers[BATCH_ID_HEADER] = batch_id
        headers[MESSAGE_IDS_HEADER] = ",".join(m.message_id for m, _ in batch.messages)
        del headers["Hermes-Message-Id"]
        try:  # batches are ANYCAST only: the first resolved address
            addresses = await self._context.resolver.resolve(sub.endpoint, sub.endpoint_address_resolver_metadata)
        except EndpointResolutionError as exc:
            return SendResult.failure(exc.message), None
        if not addresses:
            return SendResult.failure("the endpoint address resolver returned no address"), None
        result = await self._context.sender.send(
            sub, addresses[0], batch.body, headers, sub.batch_policy.request_timeout
        )
        return result, addresses[0]

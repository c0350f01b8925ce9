"""One subscription's consumer: reads its topic in the subscription's consumer group and pushes each
message to the endpoint, committing only offsets below every message still in flight.

The Kafka consumer lives on its own thread (librdkafka calls block); sending runs on the asyncio loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from hermes.broker.connection import KafkaConnection
from hermes.broker.consumer import BrokerConsumer
from hermes.consumers.offsets import OffsetTracker, Partition
from hermes.consumers.sender.http import HttpSender
from hermes.consumers.sender.result import SendResult
from hermes.domain.message import Message
from hermes.domain.subscription import Subscription

log = logging.getLogger(__name__)


class SerialConsumer:
    def __init__(
        self,
        subscription: Subscription,
        connection: KafkaConnection,
        sender: HttpSender,
        *,
        commit_interval: float = 1.0,
        session_timeout_ms: int = 6000,
    ) -> None:
        self.subscription = subscription
        self._connection = connection
        self._sender = sender
        self._commit_interval = commit_interval
        self._session_timeout_ms = session_timeout_ms
        self._tracker = OffsetTracker()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.subscription.qualified_name.qualified

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=f"consumer-{self.name}", daemon=True)
        self._thread.start()

    def update(self, subscription: Subscription) -> None:
        """Takes a changed subscription (endpoint, policy, headers...) for every following attempt."""
        self.subscription = subscription

    async def stop(self, drain_timeout: float = 5.0) -> None:
        """Stops reading, lets in-flight deliveries finish for a moment, commits what is done and closes."""
        self._stopping.set()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=drain_timeout)
        for task in list(self._tasks):
            task.cancel()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    # --- the Kafka thread ---

    def _run(self) -> None:
        consumer = BrokerConsumer(
            self._connection,
            self.subscription.consumer_group_id,
            session_timeout_ms=self._session_timeout_ms,
            on_revoke=lambda partitions: self._commit(consumer, only=partitions, forget=True),
        )
        try:
            consumer.subscribe([self.subscription.topic_name.qualified])
            paused = False
            last_commit = time.monotonic()
            while not self._stopping.is_set():
                with self._lock:
                    full = self._tracker.inflight() >= self.subscription.serial_policy.inflight_size
                if full != paused:
                    (consumer.pause if full else consumer.resume)(consumer.assignment())
                    paused = full
                messages = consumer.poll(max_messages=100, timeout=0.05 if full else 0.1)
                if messages:
                    with self._lock:
                        for message in messages:
                            self._tracker.read((message.topic, message.partition), message.offset)
                    assert self._loop is not None
                    self._loop.call_soon_threadsafe(self._dispatch, messages)
                if time.monotonic() - last_commit >= self._commit_interval:
                    self._commit(consumer)
                    last_commit = time.monotonic()
            self._commit(consumer)
        except Exception:
            log.exception("consumer of %s failed", self.name)
        finally:
            consumer.close()

    def _commit(self, consumer: BrokerConsumer, only: list[Partition] | None = None, forget: bool = False) -> None:
        with self._lock:
            offsets = self._tracker.committable()
            if only is not None:
                offsets = {p: o for p, o in offsets.items() if p in only}
        try:
            consumer.commit(offsets)
        except Exception:
            log.warning("committing offsets of %s failed; will retry", self.name, exc_info=True)
            return
        with self._lock:
            self._tracker.mark_committed(offsets)
            if forget and only is not None:
                self._tracker.forget(only)

    # --- the asyncio side ---

    def _dispatch(self, messages: list[Message]) -> None:
        for message in messages:
            task = asyncio.create_task(self._deliver(message))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, message: Message) -> None:
        """Delivers until success, a final failure or the TTL; a cancelled delivery stays unfinished, so its
        offset is never committed and the message comes again after a restart."""
        deadline = time.monotonic() + self.subscription.message_ttl_seconds
        retries = 0
        while True:
            sub = self.subscription
            result = await self._attempt(sub, message, retries)
            client_error = result.status is not None and 400 <= result.status < 500 and result.status != 429
            if result.succeeded or (client_error and not sub.serial_policy.retry_client_errors):
                break
            backoff = result.retry_after if result.retry_after is not None else sub.serial_policy.message_backoff / 1000
            if time.monotonic() + backoff > deadline:
                log.info("discarding %s of %s: %s", message.message_id, self.name, result.description)
                break
            retries += 1
            await asyncio.sleep(backoff)
        with self._lock:
            self._tracker.finish((message.topic, message.partition), message.offset)

    async def _attempt(self, sub: Subscription, message: Message, retries: int) -> SendResult:
        headers = self._sender.headers(sub, message, retries, "application/json")
        return await self._sender.send(sub, sub.endpoint.url, message.body, headers, sub.serial_policy.request_timeout)

"""Producing to Kafka with the ack modes of Hermes: one producer per mode (acks=0, acks=1 and acks=all)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from hermes.broker.connection import KafkaConnection
from hermes.broker.topics import PRODUCER_MAX_BYTES, RECORD_HEADROOM
from hermes.domain.topic import Ack
from hermes.errors import BrokerError, BrokerUnavailable, PayloadTooLarge, ServiceUnavailable

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]

_RETRIABLE = {
    KafkaError._MSG_TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS,
}


@dataclass(frozen=True)
class DeliveryReport:
    topic: str
    partition: int
    offset: int


def _to_error(err: KafkaError) -> Exception:
    if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
        return PayloadTooLarge(f"the broker refused the message as too large: {err.str()}")
    if err.code() in _RETRIABLE or err.retriable():
        return BrokerUnavailable(f"the broker did not take the message: {err.str()}")
    return BrokerError(f"the broker refused the message: {err.str()}")


Settled = Callable[[Exception | None], None]


class _Settler:
    """Hands delivery outcomes from another thread (a flush at close) to the event loop that produced, in
    batches: one wake-up of the loop per batch instead of one ``call_soon_threadsafe`` per message."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._calls: list[Callable[[], None]] = []

    def put(self, call: Callable[[], None]) -> None:
        with self._lock:
            self._calls.append(call)
            if len(self._calls) > 1:
                return  # a drain is already scheduled
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for call in calls:
            call()


# While messages await their ack, the event loop polls the producer this often (seconds).
_POLL_INTERVAL = 0.001


class _PolledProducer:
    """A confluent producer whose delivery callbacks are served on the event loop that produced: a timer polls
    it while acks are pending. (A poll thread cost a GIL hand-off and a loop wake-up per batch of acks.)"""

    def __init__(self, config: dict[str, Any]) -> None:
        self.producer = Producer(config)
        self.pending = 0
        self._timer: asyncio.TimerHandle | None = None

    def produced(self, loop: asyncio.AbstractEventLoop) -> None:
        self.pending += 1
        self.producer.poll(0)  # under load, the acks of earlier messages are served here, without waiting
        if self._timer is None:
            self._timer = loop.call_later(_POLL_INTERVAL, self._poll, loop)

    def _poll(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        self.producer.poll(0)  # runs the delivery callbacks, here on the loop
        if self.pending > 0 and not loop.is_closed():
            self._timer = loop.call_later(_POLL_INTERVAL, self._poll, loop)

    def close(self, timeout: float) -> int:
        """Flushes (callable from any thread: callbacks then reach their loops through the settler)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return int(self.producer.flush(timeout))


class BrokerProducer:
    def __init__(self, connection: KafkaConnection, **overrides: Any) -> None:
        base = {
            "linger.ms": 1,
            # A record batch must fit any topic's max.message.bytes (maxMessageSize, 1 KiB at least, plus
            # RECORD_HEADROOM): librdkafka's default of 1 MB had the broker refuse a batch of queued small
            # messages whole (413 for each). A message larger than this still goes, in a batch of its own.
            "batch.size": RECORD_HEADROOM,
            "enable.idempotence": False,
            "message.timeout.ms": 300_000,
            "queue.buffering.max.kbytes": 262_144,
            "message.max.bytes": PRODUCER_MAX_BYTES,  # librdkafka's default (1,000,000) refused larger bodies
            **overrides,
        }
        self._producers = {
            Ack.LEADER: _PolledProducer(connection.config(**base, acks=1)),
            Ack.ALL: _PolledProducer(connection.config(**base, acks="all")),
            Ack.NONE: _PolledProducer(connection.config(**base, acks=0)),  # last: warm() serves it last
        }
        self._settlers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Settler] = weakref.WeakKeyDictionary()

    def warm(self, topic: str | None = None) -> None:
        """Fetches the partition leaders of ``topic`` (of every topic when None) ahead of its first message, which
        otherwise waits for that look-up and may miss a short ack timeout (a 202 for the first publish)."""
        for polled in self._producers.values():
            try:
                polled.producer.list_topics(topic, timeout=5)
            except KafkaException as exc:
                log.info("looking up the partitions of %s failed: %s", topic or "every topic", exc)

    def produce(
        self,
        topic: str,
        value: bytes,
        settled: Settled,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        ack: Ack = Ack.LEADER,
    ) -> None:
        """Queues the message; ``settled`` is called on this event loop with None once the broker acknowledged
        it, or with the error (at once if the message cannot even be queued). The lean form of ``send`` for
        the publish path: no future, no delivery report. ``settled`` runs inside the producer's poll, so it must
        not produce (defer that with ``call_soon``).

        Must be called on the event loop that runs ``settled``.
        """
        loop = asyncio.get_running_loop()
        polled = self._producers[ack]
        loop_thread = threading.get_ident()

        def delivered(err: KafkaError | None, _: Any) -> None:  # on the loop (poll) or a flushing thread
            polled.pending -= 1
            error = None if err is None else _to_error(err)
            if threading.get_ident() == loop_thread:
                settled(error)
            else:
                self._settler(loop).put(lambda: settled(error))

        self._queue(loop, polled, topic, value, key, headers, delivered, settled)

    def send(
        self,
        topic: str,
        value: bytes,
        *,
        key: bytes | None = None,
        headers: Headers = (),
        ack: Ack = Ack.LEADER,
    ) -> asyncio.Future[DeliveryReport]:
        """Queues the message; the future completes when the broker acknowledged it (or refused it).

        Must be called on the event loop that awaits the future.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[DeliveryReport] = loop.create_future()
        polled = self._producers[ack]
        loop_thread = threading.get_ident()

        def settle(outcome: DeliveryReport | Exception) -> None:
            if future.done():
                return
            if isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        def delivered(err: KafkaError | None, msg: Any) -> None:  # on the loop (poll) or a flushing thread
            polled.pending -= 1
            outcome = _to_error(err) if err is not None else DeliveryReport(msg.topic(), msg.partition(), msg.offset())
            if threading.get_ident() == loop_thread:
                settle(outcome)
            else:
                self._settler(loop).put(lambda: settle(outcome))

        self._queue(loop, polled, topic, value, key, headers, delivered, settle)
        return future

    @staticmethod
    def _queue(
        loop: asyncio.AbstractEventLoop,
        polled: _PolledProducer,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: Headers,
        delivered: Callable[[KafkaError | None, Any], None],
        refused: Callable[[Exception], None],
    ) -> None:
        listed = headers if isinstance(headers, list) else list(headers)  # confluent takes a list (or a dict)
        try:
            polled.producer.produce(topic, value=value, key=key, headers=listed, on_delivery=delivered)
        except BufferError:
            refused(ServiceUnavailable("the producer buffer is full; try again later"))
            return
        except KafkaException as exc:
            refused(_to_error(exc.args[0]))
            return
        polled.produced(loop)

    def _settler(self, loop: asyncio.AbstractEventLoop) -> _Settler:
        settler = self._settlers.get(loop)
        if settler is None:
            settler = self._settlers[loop] = _Settler(loop)
        return settler

    def reachable(self, timeout: float) -> bool:
        """Whether the broker answers a metadata request within ``timeout`` seconds (blocks: call from a thread)."""
        try:
            self._producers[Ack.LEADER].producer.list_topics(timeout=timeout)
        except KafkaException:
            return False
        return True

    def close(self, timeout: float = 10.0) -> int:
        """Flushes and stops; returns how many messages were still unacknowledged."""
        return sum(p.close(timeout) for p in self._producers.values())

"""Idempotent publishing: a publish whose ``Idempotency-Key`` repeats one answered 201 or 202 on the same topic
within the topic's ``idempotencyWindow`` is answered as that first one was (its status and ``Hermes-Message-Id``,
with ``Idempotent-Replayed: true``) and produces nothing; the same key with another body is 422.

The keys live in Hermes' compacted Kafka topic ``hermes.idempotency`` (record key ``<topic>/<idempotency key>``;
value: the body's digest, the status, the message id and the end of the window), written once a publish is
answered. Every frontend process (every worker of one too) reads the whole topic at start and follows it afterwards
into an in-memory index, so that a key outlives restarts and is known to every frontend of the Kafka cluster, and
the check on the publish path is a dict look-up. A repeat arriving while its first is still in flight in the same
process waits for the first's answer. Two frontends that get the same key before the first's record reached the
other (tens of milliseconds) both publish it: a duplicate, never a loss."""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import orjson

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.broker.producer import BrokerProducer
from hermes.broker.topics import IDEMPOTENCY
from hermes.domain.topic import Ack, Topic
from hermes.errors import HermesError, IdempotencyKeyReused, ValidationError
from hermes.frontend.publishing import Answer, PublishResult
from hermes.http.lean import SpooledBody

log = logging.getLogger(__name__)

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
_KEY = IDEMPOTENCY_KEY_HEADER.lower()  # request headers arrive keyed by lower-case name
MAX_KEY_LENGTH = 255
# A restarted frontend serves once it has read the keys up to here, or after this long (then it learns the rest
# while serving: a repeat it does not know yet is published again).
_CATCH_UP_SECONDS = 30.0


class _Entry(NamedTuple):
    digest: bytes
    status: int  # 201 or 202
    message_id: str
    until: float  # epoch seconds: the end of its window


class _Twin:
    """A first publish of its key, in flight in this process: repeats wait for its answer."""

    __slots__ = ("digest", "waiting")

    def __init__(self, digest: bytes) -> None:
        self.digest = digest
        self.waiting: list[Answer] = []


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=16).digest()


def _spooled_digest(body: SpooledBody) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for chunk in body.chunks():
        digest.update(chunk)
    return digest.digest()


class IdempotencyKeys:
    """The index of keys of this frontend process, fed by its own publishes and by ``hermes.idempotency``."""

    def __init__(self, producer: BrokerProducer, connection: KafkaConnection, admin: BrokerAdmin) -> None:
        self._producer = producer
        self._connection = connection
        self._admin = admin
        self._index: dict[str, _Entry] = {}
        self._expiry: list[tuple[float, str]] = []  # a heap: (until, key), to forget keys whose window is over
        self._twins: dict[str, _Twin] = {}
        self._outbox: list[tuple[bytes, bytes]] = []
        self._tasks: set[asyncio.Task[None]] = set()  # digests of spooled bodies
        self._stopping = threading.Event()
        self._follower: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        """Whether ``<topic>/<key>`` is known here (and its window maybe over)."""
        return name in self._index

    # --- the publish path ---

    @staticmethod
    def key_of(headers: Mapping[str, str]) -> str | None:
        """The request's key (None without the header); 400 naming the header when it is no key."""
        key = headers.get(_KEY)
        if key is not None and not (0 < len(key) <= MAX_KEY_LENGTH and key.isprintable()):
            raise ValidationError(
                f"must be 1 to {MAX_KEY_LENGTH} printable characters (a UUID, say)", IDEMPOTENCY_KEY_HEADER
            )
        return key

    def publish(self, topic: Topic, key: str, body: bytes | SpooledBody, answer: Answer, produce: Produce) -> None:
        """``produce(answer)`` publishes the message unless ``key`` is known: then ``answer`` gets the first
        publish's result (at once, or when its twin in flight here is answered). Raises what is wrong."""
        if isinstance(body, SpooledBody):  # a large body is read in a thread
            task = asyncio.get_running_loop().create_task(self._publish_spooled(topic, key, body, answer, produce))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        admitted = self._admit(topic, key, _digest(body), answer)
        if admitted is not None:
            _produce(produce, admitted)

    async def _publish_spooled(
        self, topic: Topic, key: str, body: SpooledBody, answer: Answer, produce: Produce
    ) -> None:
        try:
            admitted = self._admit(topic, key, await asyncio.to_thread(_spooled_digest, body), answer)
        except Exception as exc:  # a task's error reaches nobody else: the request is answered with it
            answer(exc)
            return
        if admitted is not None:
            _produce(produce, admitted)

    def _admit(self, topic: Topic, key: str, digest: bytes, answer: Answer) -> Answer | None:
        """None when ``answer`` is taken care of; else the answer to publish with, which records the key."""
        name = f"{topic.qualified_name}/{key}"
        entry = self._index.get(name)
        if entry is not None and entry.until > time.time():
            if entry.digest != digest:
                raise _reused(topic, key)
            answer(PublishResult(entry.message_id, entry.status == 201, replayed=True))
            return None
        twin = self._twins.get(name)
        if twin is not None:
            if twin.digest != digest:
                raise _reused(topic, key)
            twin.waiting.append(answer)
            return None
        first = self._twins[name] = _Twin(digest)
        window = topic.idempotency_window.seconds

        def answered(outcome: PublishResult | Exception) -> None:
            del self._twins[name]
            repeat: PublishResult | Exception = outcome  # an error: repeats get it too, and may try again
            if isinstance(outcome, PublishResult):
                status = 201 if outcome.acknowledged else 202
                recorded = _Entry(digest, status, outcome.message_id, time.time() + window)
                self._remember(name, recorded)
                self._write(name, recorded)
                repeat = outcome._replace(replayed=True)
            answer(outcome)
            for waiting in first.waiting:
                waiting(repeat)

        return answered

    def _remember(self, name: str, entry: _Entry) -> None:
        self._index[name] = entry
        expiry = self._expiry
        heapq.heappush(expiry, (entry.until, name))
        now = time.time()
        while expiry[0][0] <= now:
            _, gone = heapq.heappop(expiry)
            current = self._index.get(gone)
            if current is not None and current.until <= now:
                del self._index[gone]

    def _write(self, name: str, entry: _Entry) -> None:
        """Queued, and produced a moment later: this may run inside the producer's poll, which must not produce."""
        value = orjson.dumps(
            {
                "digest": entry.digest.hex(),
                "status": entry.status,
                "messageId": entry.message_id,
                "until": int(entry.until * 1000),
            }
        )
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append((name.encode(), value))

    def _flush(self) -> None:
        outbox, self._outbox = self._outbox, []
        for key, value in outbox:
            self._producer.produce(IDEMPOTENCY.name, value, _written, key=key, ack=Ack.LEADER)

    # --- the keys of every frontend, from hermes.idempotency ---

    async def start(self) -> None:
        """Reads the keys recorded so far, then follows the topic in a thread."""
        consumer = BrokerConsumer(self._connection, "hermes-idempotency", fetch_wait_ms=100)
        try:
            records = await asyncio.to_thread(self._catch_up, consumer)
        except HermesError as exc:
            log.warning("idempotency: reading %s failed (followed from now on): %s", IDEMPOTENCY.name, exc.message)
            records = []
        self._learn(records)
        log.info("idempotency: %d keys within their window", len(self))
        loop = asyncio.get_running_loop()
        self._follower = threading.Thread(
            target=self._follow, args=(consumer, loop), name="idempotency-keys", daemon=True
        )
        self._follower.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._follower is not None:
            await asyncio.to_thread(self._follower.join)
        for task in self._tasks:
            task.cancel()

    def _catch_up(self, consumer: BrokerConsumer) -> list[tuple[bytes | None, bytes]]:
        ends = self._admin.end_offsets(IDEMPOTENCY.name)
        consumer.assign({(IDEMPOTENCY.name, p): 0 for p in ends})  # 0 or the earliest left (auto.offset.reset)
        behind = {p for p, end in ends.items() if end > 0}
        records: list[tuple[bytes | None, bytes]] = []
        deadline = time.monotonic() + _CATCH_UP_SECONDS
        while behind and time.monotonic() < deadline:
            for message in consumer.poll(5000, 0.2):
                records.append((message.key, message.body))
                if message.offset + 1 >= ends[message.partition]:
                    behind.discard(message.partition)
        if behind:
            log.warning("idempotency: keys not all read in %.0f s, the rest while serving", _CATCH_UP_SECONDS)
        return records

    def _follow(self, consumer: BrokerConsumer, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    messages = consumer.poll(5000, 0.1)
                except Exception:  # the thread must outlive a broker hiccup
                    log.warning("idempotency: reading %s failed", IDEMPOTENCY.name, exc_info=True)
                    self._stopping.wait(1.0)
                    continue
                if messages:
                    loop.call_soon_threadsafe(self._learn, [(m.key, m.body) for m in messages])
        finally:
            consumer.close()

    def _learn(self, records: list[tuple[bytes | None, bytes]]) -> None:
        now = time.time()
        for key, value in records:
            try:
                data = orjson.loads(value)
                entry = _Entry(
                    bytes.fromhex(data["digest"]), int(data["status"]), str(data["messageId"]), data["until"] / 1000
                )
                name = key.decode() if key is not None else ""
            except (ValueError, KeyError, TypeError, AttributeError):
                log.debug("idempotency: a record of %s that is not a key is ignored", IDEMPOTENCY.name)
                continue
            if entry.until > now and name:
                self._remember(name, entry)


Produce = Callable[[Answer], None]


def _produce(produce: Produce, admitted: Answer) -> None:
    """Whatever refuses the message answers it through ``admitted``, so that its twins are answered too."""
    try:
        produce(admitted)
    except Exception as exc:
        admitted(exc)


def _reused(topic: Topic, key: str) -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        f"{IDEMPOTENCY_KEY_HEADER}: {key!r} was used on topic {topic.qualified_name} for a message with another "
        "body within the topic's idempotencyWindow; publish a new message with a new key"
    )


def _written(error: Exception | None) -> None:
    if error is not None:  # the publish itself succeeded: only a repeat of it will be published again
        log.warning("idempotency: recording a key in %s failed: %s", IDEMPOTENCY.name, error)

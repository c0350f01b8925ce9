"""Idempotent publishing: a publish whose ``Idempotency-Key`` repeats one answered 201 or 202 on the same topic
within the topic's ``idempotencyWindow`` is answered as that first one was (its status and ``Hermes-Message-Id``,
with ``Idempotent-Replayed: true``) and produces nothing; the same key with another body is 422.

The keys of a frontend process live in a table in C (``key_table.c``): the check on the publish path, the first
publish's answer and the keys kept are C calls, with no Python object per key (in Python they cost a frontend 9-13
µs more per keyed publish than a plain one, three times what issue 34 allows: docs/benchmarks.md). This module does
the rest: the rare paths (a repeat waiting for its first publish in flight here, a body spooled to disk, a key that
is no key) and Kafka.

The keys live in Hermes' Kafka topic ``hermes.idempotency``, written once a publish is answered: one record holds
every key answered within 10 ms (the table's own slots: the key's and the body's digests, the message id, the end
of the window and whether it was acknowledged), keyed by the process that wrote it. Every frontend process (every
worker of one too) reads the whole topic at start and follows it afterwards, skipping its own records, so that a
key outlives restarts and is known to every frontend of the Kafka cluster. A key's window is counted from its first
publish's answer. A repeat arriving while its first is in flight in the same process waits for the first's answer.
Two frontends that get the same key before the first's record reached the other (tens of milliseconds) both publish
it: a duplicate, never a loss. Records of the versions before (JSON) are still read."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import orjson
import xxhash

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.broker.producer import BrokerProducer
from hermes.broker.topics import IDEMPOTENCY
from hermes.domain.message import IDEMPOTENCY_KEY_HEADER
from hermes.domain.topic import Ack, Topic
from hermes.errors import HermesError, IdempotencyKeyReused, ValidationError
from hermes.frontend.key_table import MAX_KEY_LENGTH, RECORD_MAGIC, KeyTable
from hermes.frontend.publishing import Answer, PublishResult
from hermes.http.lean import SpooledBody
from hermes.tasks import STOP_BOUND, NamedThread, ended

log = logging.getLogger(__name__)

# A restarted frontend serves once it has read the keys up to here, or after this long (then it learns the rest
# while serving: a repeat it does not know yet is published again).
_CATCH_UP_SECONDS = 30.0
# Keys answered within this many seconds go in one record. A callback due at once (call_soon) made the event loop
# turn once more for every batch of publishes, costing more than the keys themselves.
_FLUSH_DELAY = 0.01
# The keys of other frontends reach this one within this many milliseconds (and their 10 ms batch): the broker
# answers the follower's fetch when it has a megabyte or waited this long. Each 10 ms record of this process, read
# back, woke the follower otherwise (a fetch, its thread, a GIL hand-off): 2.3 µs of CPU per keyed publish.
_FOLLOW_WAIT_MS = 50
_FOLLOW: dict[str, Any] = {"fetch.min.bytes": 1_000_000}
# The digests are xxHash's XXH3, not a cryptographic hash: the body's only tells a repeat from another message
# under the same key, which a publisher's own mistake would make, and SHA-256 cost 1 µs of a 1 KB body (XXH3:
# 0.1). A key's is the 128-bit XXH3 of the key seeded with the XXH3-64 of its topic's name (that two of a million
# keys share one: a chance of 10^-27). The versions before wrote JSON records: an entry per key (the body's digest
# in 16 hex digits; one of 32, an older SHA-256, is ignored) or a record of columns per topic.
_DIGEST_LENGTH = 16
_DIGEST_MASK = (1 << 64) - 1
# Publishes a message (Publisher's own path): its topic, id, body, request headers, and the answer to call.
Produce = Callable[[Topic, str, bytes | SpooledBody, Mapping[str, str], Answer], None]
# A key of a JSON record, as KeyTable.record takes it: its digest, the body's, the message id, whether it was
# acknowledged, the end of its window (epoch ms).
_Learnt = tuple[int, int, str, bool, int]


def _name_digest(topic: str, key: str) -> int:
    return xxhash.xxh3_128_intdigest(key.encode(), xxhash.xxh3_64_intdigest(topic.encode()))


def _spooled_digest(body: SpooledBody) -> int:
    digest = xxhash.xxh3_64()
    for chunk in body.chunks():
        digest.update(chunk)
    return digest.intdigest()


class IdempotencyKeys:
    """The keys of this frontend process, fed by its own publishes and by ``hermes.idempotency``."""

    # publish(produce, topic, message_id, body, headers, key, answer): publishes the message with ``produce`` unless
    # ``key`` is known: then ``answer`` gets the first publish's result (at once, or when its twin in flight here is
    # answered). Raises what is wrong (400 for a key that is no key, 422 for a key used with another body). The
    # table's own method: one C call on the publish path.
    publish: Callable[[Produce, Topic, str, bytes | SpooledBody, Mapping[str, str], str, Answer], None]

    def __init__(self, producer: BrokerProducer, connection: KafkaConnection, admin: BrokerAdmin) -> None:
        self._producer = producer
        self._connection = connection
        self._admin = admin
        self._table = KeyTable(
            result=PublishResult,
            rejected=_rejected,
            wait=self._wait,
            release=self._release,
            spooled=self._spooled,
            kept=self._kept,
        )
        self.publish = self._table.publish
        self._waiting: dict[int, list[Answer]] = {}  # repeats of first publishes in flight, waiting for their answer
        self._flushing: asyncio.TimerHandle | None = None
        self._writer = uuid.uuid4().hex.encode()  # its records' Kafka key: the follower skips them
        self._tasks: set[asyncio.Task[None]] = set()  # digests of spooled bodies
        self._stopping = threading.Event()
        self._follower: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, name: object) -> bool:
        """Whether ``<topic>/<key>`` is known here within its window (or in flight)."""
        if not isinstance(name, str):
            return False
        topic, _, key = name.partition("/")
        return self._table.find(_name_digest(topic, key)) is not None

    # --- the rare paths of the publish path (the table calls them) ---

    def _spooled(
        self,
        produce: Produce,
        topic: Topic,
        message_id: str,
        body: SpooledBody,
        headers: Mapping[str, str],
        key: str,
        answer: Answer,
    ) -> None:
        """A large body, on disk: its digest is taken in a thread, then it is published as any other."""

        async def publish() -> None:
            try:
                digest = await asyncio.to_thread(_spooled_digest, body)
                self._table.publish(produce, topic, message_id, body, headers, key, answer, digest)
            except Exception as exc:  # a task's error reaches nobody else: the request is answered with it
                answer(exc)

        task = asyncio.get_running_loop().create_task(publish())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _wait(self, named: int, answer: Answer) -> None:
        """A repeat of a first publish in flight here: answered as it is."""
        self._waiting.setdefault(named, []).append(answer)

    def _release(self, named: int, outcome: PublishResult | Exception) -> None:
        """The first publish of waiting repeats was answered: so are they (an error too: they may try again)."""
        repeat = outcome._replace(replayed=True) if isinstance(outcome, PublishResult) else outcome
        for waiter in self._waiting.pop(named, ()):
            waiter(repeat)

    def _kept(self) -> None:
        """The first key answered since the last flush: written with those answered within 10 ms (this may run
        inside the producer's poll, which must not produce)."""
        self._flushing = asyncio.get_running_loop().call_later(_FLUSH_DELAY, self._flush)

    def _flush(self) -> None:
        self._flushing = None
        for record in self._table.flush():
            self._producer.produce(IDEMPOTENCY.name, record, _written, key=self._writer, ack=Ack.LEADER)

    # --- the keys of every frontend, from hermes.idempotency ---

    async def start(self) -> None:
        """Reads the keys recorded so far, then follows the topic in a thread."""
        consumer = BrokerConsumer(self._connection, "hermes-idempotency", fetch_wait_ms=_FOLLOW_WAIT_MS, **_FOLLOW)
        try:
            records = await asyncio.to_thread(self._catch_up, consumer)
        except HermesError as exc:
            log.warning("idempotency: reading %s failed (followed from now on): %s", IDEMPOTENCY.name, exc.message)
            records = []
        self._learn(records)
        log.info("idempotency: %d keys within their window", len(self))
        loop = asyncio.get_running_loop()
        self._follower = NamedThread(target=self._follow, args=(consumer, loop), name="idempotency-keys", daemon=True)
        self._follower.start()

    async def stop(self) -> None:
        """Writes the keys not written yet (the producer flushes them as it closes, after this)."""
        if self._flushing is not None:
            self._flushing.cancel()
            self._flush()
        self._stopping.set()
        await ended(self._follower, STOP_BOUND, "the idempotency keys' follower")
        for task in self._tasks:
            task.cancel()

    def _assign(self, consumer: BrokerConsumer) -> dict[int, int]:
        """Reads every partition from its start; returns their ends now."""
        ends = self._admin.end_offsets(IDEMPOTENCY.name)
        consumer.assign({(IDEMPOTENCY.name, p): 0 for p in ends})  # 0 or the earliest left (auto.offset.reset)
        return ends

    def _catch_up(self, consumer: BrokerConsumer) -> list[bytes]:
        ends = self._assign(consumer)
        behind = {p for p, end in ends.items() if end > 0}
        records: list[bytes] = []
        deadline = time.monotonic() + _CATCH_UP_SECONDS
        while behind and time.monotonic() < deadline:
            for message in consumer.poll(5000, 0.2):
                records.append(message.body)
                if message.offset + 1 >= ends[message.partition]:
                    behind.discard(message.partition)
        if behind:
            log.warning("idempotency: keys not all read in %.0f s, the rest while serving", _CATCH_UP_SECONDS)
        return records

    def _follow(self, consumer: BrokerConsumer, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    # the broker failed the catch-up, or the topic was missing: tried again each second
                    if not consumer.assignment() and not self._assign(consumer):
                        self._stopping.wait(1.0)
                        continue
                    messages = consumer.poll(5000, 0.1)
                except Exception:  # the thread must outlive a broker hiccup
                    log.warning("idempotency: reading %s failed", IDEMPOTENCY.name, exc_info=True)
                    self._stopping.wait(1.0)
                    continue
                others = [m.body for m in messages if m.key != self._writer]
                if others:
                    loop.call_soon_threadsafe(self._learn, others)
        finally:
            consumer.close()

    def _learn(self, records: list[bytes]) -> None:
        """Keeps the keys of records, whatever version wrote them; a record that holds no keys is ignored."""
        for record in records:
            try:
                if record.startswith(RECORD_MAGIC):
                    self._table.learn(record)
                else:  # JSON, of a version before
                    keys = orjson.loads(record)
                    self._table.learn(KeyTable.record(_columns(keys) if isinstance(keys, dict) else _entries(keys)))
            except (ValueError, TypeError, KeyError):
                log.debug("idempotency: a record of %s that holds no keys is ignored", IDEMPOTENCY.name)


def _columns(record: dict[str, Any]) -> list[_Learnt]:
    """The keys of a record of columns (the version before): one topic, one end of window, a column per field."""
    topic, until = str(record["topic"]), int(record["until"])
    keys, digests, ids, acknowledged = (record[c] for c in ("keys", "digests", "ids", "acknowledged"))
    return [
        (_name_digest(topic, str(key)), digest, str(message_id), acked, until)
        for key, digest, message_id, acked in zip(keys, digests, ids, acknowledged, strict=True)
        if isinstance(digest, int) and 0 <= digest <= _DIGEST_MASK and isinstance(acked, bool)
    ]


def _entries(entries: list[Any]) -> list[_Learnt]:
    """The keys of a record of entries (two versions before): ``<topic>/<key>``, the body's digest in 16 hex
    digits, the status (201, 202), the message id, the end of the window."""
    learnt = []
    for name, digest, status, message_id, until in entries:
        if status in (201, 202) and isinstance(digest, str) and len(digest) == _DIGEST_LENGTH:
            topic, _, key = str(name).partition("/")
            learnt.append((_name_digest(topic, key), int(digest, 16), str(message_id), status == 201, int(until)))
    return learnt


def _rejected(topic: Topic, key: str, reused: bool) -> HermesError:
    """What the table raises: a key used with another body (422), or a key that is no key (400)."""
    if reused:
        return IdempotencyKeyReused(
            f"{IDEMPOTENCY_KEY_HEADER}: {key!r} was used on topic {topic.qualified_name} for a message with another "
            "body within the topic's idempotencyWindow; publish a new message with a new key"
        )
    return ValidationError(f"must be 1 to {MAX_KEY_LENGTH} printable characters (a UUID, say)", IDEMPOTENCY_KEY_HEADER)


def _written(error: Exception | None) -> None:
    if error is not None:  # the publish itself succeeded: only a repeat of it will be published again
        log.warning("idempotency: recording a key in %s failed: %s", IDEMPOTENCY.name, error)

"""Idempotent publishing: a publish whose ``Idempotency-Key`` repeats one answered 201 or 202 on the same topic
within the topic's ``idempotencyWindow`` is answered as that first one was (its status and ``Hermes-Message-Id``,
with ``Idempotent-Replayed: true``) and produces nothing; the same key with another body is 422.

The keys live in Hermes' Kafka topic ``hermes.idempotency``, written once a publish is answered: one record holds
every key answered within 10 ms (``<topic>/<key>``, the body's digest, the status, the
message id, the end of the window), keyed by the process that wrote it (a record per key, compacted, cost the
frontend some 20 µs of CPU more per publish, writing and reading it back). Every frontend process (every worker
of one too) reads the whole topic at start and follows it afterwards into an in-memory index, skipping its own
records, so that a key outlives restarts and is known to every frontend of the Kafka cluster, and the check on
the publish path is a dict look-up. A repeat arriving while its first is still in flight in the same process
waits for the first's answer. Two frontends that get the same key before the first's record reached the other
(tens of milliseconds) both publish it: a duplicate, never a loss."""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

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
# Keys answered within this many seconds go in one record. A callback due at once (call_soon) made the event loop
# turn once more for every batch of publishes, costing more than the keys themselves.
_FLUSH_DELAY = 0.01
# The keys of other frontends reach this one within this many milliseconds (and their 10 ms batch): the broker
# answers the follower's fetch when it has a megabyte or waited this long. Each 10 ms record of this process, read
# back, woke the follower otherwise (a fetch, its thread, a GIL hand-off): 2.3 µs of CPU per keyed publish.
_FOLLOW_WAIT_MS = 50
_FOLLOW: dict[str, Any] = {"fetch.min.bytes": 1_000_000}
# A record of keys stays below Kafka's 1 MB records (a key and its entry take up to about 600 bytes)
_KEYS_PER_RECORD = 1000


# A key's first publish as its record in hermes.idempotency holds it: ``<topic>/<key>``, the body's digest, the
# status (201, 202), its message id, the end of its window (epoch milliseconds).
_Entry = tuple[str, str, int, str, int]
_DIGEST_LENGTH = 32
# The index holds an entry in one string: the end of its window (13 digits), the status, the digest, the length of
# the message id (3 digits), the message id, then ``<topic>/<key>``. The same string is the expiry heap's item (its
# order is the windows' ends'). With a tuple per key the index was a container the garbage collector tracks: each
# of its collections walked the hundreds of thousands of keys of the window, 5-6 µs of CPU per keyed publish; and
# each object kept per key slows every allocation of the process a little (two objects now, four before).
_UNTIL, _STATUS, _DIGEST = slice(0, 13), slice(13, 16), slice(16, 16 + _DIGEST_LENGTH)
_ID_LENGTH = slice(16 + _DIGEST_LENGTH, 19 + _DIGEST_LENGTH)
_MESSAGE_ID = 19 + _DIGEST_LENGTH
_NEVER = 10**13  # in 2286: an end of window of 14 digits is no record of this code's
_LONGEST_ID = 999


def _packed(entry: _Entry) -> str:
    return f"{entry[4]:013d}{entry[2]}{entry[1]}{len(entry[3]):03d}{entry[3]}{entry[0]}"


def _message_id(packed: str) -> str:
    return packed[_MESSAGE_ID : _MESSAGE_ID + int(packed[_ID_LENGTH])]


def _name(packed: str) -> str:
    return packed[_MESSAGE_ID + int(packed[_ID_LENGTH]) :]


def _digest(body: bytes) -> str:
    """SHA-256 (the CPU's SHA instructions make it the cheapest of hashlib's here), its first 16 bytes in hex."""
    return hashlib.sha256(body).hexdigest()[:_DIGEST_LENGTH]


def _spooled_digest(body: SpooledBody) -> str:
    digest = hashlib.sha256()
    for chunk in body.chunks():
        digest.update(chunk)
    return digest.hexdigest()[:_DIGEST_LENGTH]


class IdempotencyKeys:
    """The index of keys of this frontend process, fed by its own publishes and by ``hermes.idempotency``."""

    def __init__(self, producer: BrokerProducer, connection: KafkaConnection, admin: BrokerAdmin) -> None:
        self._producer = producer
        self._connection = connection
        self._admin = admin
        self._index: dict[str, str] = {}  # <topic>/<key>: its entry packed
        self._expiry: list[str] = []  # a heap of the index's entries, to forget keys whose window is over
        self._twins: dict[str, str] = {}  # first publishes in flight here: their digests
        self._waiting: dict[str, list[Answer]] = {}  # repeats of those, waiting for their answer
        self._outbox: list[_Entry] = []  # keys answered, not written yet
        self._flushing: asyncio.TimerHandle | None = None
        self._writer = uuid.uuid4().hex.encode()  # its records' Kafka key: the follower skips them
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

    def _admit(self, topic: Topic, key: str, digest: str, answer: Answer) -> Answer | None:
        """None when ``answer`` is taken care of; else the answer to publish with, which records the key."""
        name = f"{topic.qualified_name}/{key}"
        known = self._index.get(name)
        if known is not None and int(known[_UNTIL]) > time.time() * 1000:
            if known[_DIGEST] != digest:
                raise _reused(topic, key)
            answer(PublishResult(_message_id(known), known[_STATUS] == "201", replayed=True))
            return None
        twin = self._twins.get(name)
        if twin is not None:
            if twin != digest:
                raise _reused(topic, key)
            self._waiting.setdefault(name, []).append(answer)
            return None
        self._twins[name] = digest
        return _First(self, name, digest, topic.idempotency_window.seconds * 1000, answer)

    def _answered(self, name: str, entry: _Entry | None, outcome: PublishResult | Exception) -> None:
        """The first publish of ``name`` is answered (``entry``: it was accepted); repeats that came meanwhile
        get its answer (an error too: they may try again)."""
        del self._twins[name]
        if entry is not None:
            self._remember(entry)
            if not self._outbox:  # produced with the others answered meanwhile (this may run inside the
                self._flushing = asyncio.get_running_loop().call_later(_FLUSH_DELAY, self._flush)  # producer's poll)
            self._outbox.append(entry)
        waiting = self._waiting.pop(name, None) if self._waiting else None
        if waiting:
            repeat = outcome._replace(replayed=True) if isinstance(outcome, PublishResult) else outcome
            for answer in waiting:
                answer(repeat)

    def _remember(self, entry: _Entry) -> None:
        self._index[entry[0]] = packed = _packed(entry)
        heapq.heappush(self._expiry, packed)

    def _forget_expired(self) -> None:
        expiry, index, now = self._expiry, self._index, time.time() * 1000
        while expiry and int(expiry[0][_UNTIL]) <= now:
            gone = _name(heapq.heappop(expiry))
            current = index.get(gone)
            if current is not None and int(current[_UNTIL]) <= now:
                del index[gone]

    def _flush(self) -> None:
        self._flushing = None
        keys, self._outbox = self._outbox, []
        for start in range(0, len(keys), _KEYS_PER_RECORD):
            value = orjson.dumps(keys[start : start + _KEYS_PER_RECORD])
            self._producer.produce(IDEMPOTENCY.name, value, _written, key=self._writer, ack=Ack.LEADER)
        self._forget_expired()

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
        self._follower = threading.Thread(
            target=self._follow, args=(consumer, loop), name="idempotency-keys", daemon=True
        )
        self._follower.start()

    async def stop(self) -> None:
        """Writes the keys not written yet (the producer flushes them as it closes, after this)."""
        if self._flushing is not None:
            self._flushing.cancel()
            self._flush()
        self._stopping.set()
        if self._follower is not None:
            await asyncio.to_thread(self._follower.join)
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
        now = time.time() * 1000
        for record in records:
            try:
                keys = orjson.loads(record)
                entries = [(str(n), str(d), int(s), str(m), int(u)) for n, d, s, m, u in keys]
            except (ValueError, TypeError):
                log.debug("idempotency: a record of %s that holds no keys is ignored", IDEMPOTENCY.name)
                continue
            for entry in entries:
                if (
                    now < entry[4] < _NEVER
                    and entry[2] in (201, 202)
                    and len(entry[1]) == _DIGEST_LENGTH
                    and len(entry[3]) <= _LONGEST_ID
                ):
                    self._remember(entry)
        self._forget_expired()


Produce = Callable[[Answer], None]


class _First:
    """The answer of a key's first publish: records the key when the publish was accepted."""

    __slots__ = ("_answer", "_digest", "_keys", "_name", "_window_ms")

    def __init__(self, keys: IdempotencyKeys, name: str, digest: str, window_ms: int, answer: Answer) -> None:
        self._keys = keys
        self._name = name
        self._digest = digest
        self._window_ms = window_ms
        self._answer = answer

    def __call__(self, outcome: PublishResult | Exception) -> None:
        entry = None
        if isinstance(outcome, PublishResult):
            status = 201 if outcome.acknowledged else 202
            entry = (self._name, self._digest, status, outcome.message_id, int(time.time() * 1000) + self._window_ms)
        self._keys._answered(self._name, entry, outcome)
        self._answer(outcome)


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

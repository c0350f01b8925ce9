"""Idempotent publishing: a publish whose ``Idempotency-Key`` repeats one answered 201 or 202 on the same topic
within the topic's ``idempotencyWindow`` is answered as that first one was (its status and ``Hermes-Message-Id``,
with ``Idempotent-Replayed: true``) and produces nothing; the same key with another body is 422.

The keys live in Hermes' Kafka topic ``hermes.idempotency``, written once a publish is answered: one record holds
every key of a topic answered within 10 ms, as columns (the topic, the end of their window, the keys, the bodies'
digests, the message ids, whether each was acknowledged), keyed by the process that wrote it (a record per key,
compacted, cost the frontend some 20 µs of CPU more per publish, writing and reading it back). Every frontend
process (every worker of one too) reads the whole topic at start and follows it afterwards into an in-memory index,
skipping its own records, so that a key outlives restarts and is known to every frontend of the Kafka cluster. The
check on the publish path is one dict look-up: a first publish enters the index as in flight, and is kept there with
those answered within the same 10 ms when their record is written (its window counted from then: a key is forgotten
up to 10 ms late, never early). A repeat arriving while its first is in flight in the same process waits for the
first's answer; one arriving after the answer, before the record, gets it at once. Two frontends that get the same
key before the first's record reached the other (tens of milliseconds) both publish it: a duplicate, never a loss."""

from __future__ import annotations

import asyncio
import collections
import functools
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
from hermes.frontend.publishing import Answer, PublishResult
from hermes.http.lean import SpooledBody
from hermes.tasks import STOP_BOUND, NamedThread, ended

log = logging.getLogger(__name__)

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
# A record of keys stays below Kafka's 1 MB records (a key and its columns take up to about 350 bytes)
_KEYS_PER_RECORD = 1000


# A key's first publish as a record of the version before holds it (still read: keys written before an upgrade):
# ``<topic>/<key>``, the body's digest (16 hex digits), the status (201, 202), its message id, the end of its window
# (epoch milliseconds).
_Entry = tuple[str, str, int, str, int]
# The digests are xxHash's XXH3, not a cryptographic hash: the body's only tells a repeat from another message
# under the same key, which a publisher's own mistake would make, and SHA-256 cost 1 µs of a 1 KB body (XXH3:
# 0.1). A record of columns holds it as a number; the version before wrote an entry per key with its 16 hex digits
# (still read), and one of 32 (the SHA-256 of an older version) is ignored, so that none is compared with another's.
_DIGEST_LENGTH = 16
_NEVER = 10**13  # in 2286: an end of window of 14 digits is no record of this code's
# The index maps a key's 128-bit XXH3, seeded with the XXH3 of its topic's name (that two of a million keys share
# one: a chance of 10^-27), to its first publish packed in one int: the message id's 128 bits (a UUID, as every
# Hermes frontend makes them), the body's digest, the end of the window, and 1 when it was answered 201. Ints only:
# the dict is no container the garbage collector walks, and a key costs about 150 bytes (its strings and a tuple
# took 450). A first publish not written yet is its body's digest alone (no end of window): the one look-up of a
# publish finds a repeat of a key in flight here as it finds a known one.
_UNTIL_BITS = 44  # milliseconds until the year 2527
_UNTIL_MASK = (1 << _UNTIL_BITS) - 1
_DIGEST_SHIFT = _UNTIL_BITS + 1
_ID_SHIFT = _DIGEST_SHIFT + 64
_DIGEST_MASK = (1 << 64) - 1
# The topics' seeds, by the identity of their Topic (its fields change by a new object): forgotten when this many
_TOPICS_KEPT = 1024


def _seed(topic: str) -> int:
    return xxhash.xxh3_64_intdigest(topic.encode())


def _name_digest(topic: str, key: str) -> int:
    return xxhash.xxh3_128_intdigest(key.encode(), _seed(topic))


def _packed(message_id: int, digest: int, until: int, acknowledged: bool) -> int:
    return (message_id << _ID_SHIFT) | (digest << _DIGEST_SHIFT) | (until << 1) | acknowledged


def _until(packed: int) -> int:
    return (packed >> 1) & _UNTIL_MASK


def _uuid_bits(message_id: str) -> int | None:
    """A message id's 128 bits; None when it is not a UUID in its canonical form (no entry of this code's)."""
    try:
        bits = int(message_id.replace("-", ""), 16)
    except ValueError:
        return None
    return bits if len(message_id) == 36 and _uuid_text(bits) == message_id else None


def _uuid_text(bits: int) -> str:
    h = f"{bits:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _spooled_digest(body: SpooledBody) -> int:
    digest = xxhash.xxh3_64()
    for chunk in body.chunks():
        digest.update(chunk)
    return digest.intdigest()


class _TopicKeys:
    """What the key path needs of a topic, taken once per Topic object."""

    __slots__ = ("name", "seed", "topic", "window_ms")

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.name = topic.qualified_name
        self.seed = _seed(self.name)
        self.window_ms = topic.idempotency_window.seconds * 1000


# One topic's keys in the order their windows end (the order they are answered, but for a change of the topic's
# window: a key is then forgotten a little late, never early): the end of a window and the keys that share it (those
# of one flush, or of one record learnt), a tuple of the index's own ints (untracked by the collector once it saw it).
_Expiries = collections.deque[tuple[int, tuple[int, ...]]]


# A first publish answered and not written yet takes this many items of the outbox, a flat list: its key's digest,
# its body's, its topic, its key, its message id, whether it was acknowledged. A tuple per key (and its outcome)
# lived until the flush, through the collector's young generations: 0.3 µs more of collections per keyed publish.
_ROW = 6
# Publishes a message (Publisher's own path): its topic, id, body, request headers, and the answer to call.
Produce = Callable[[Topic, str, bytes | SpooledBody, Mapping[str, str], Answer], None]


class IdempotencyKeys:
    """The index of keys of this frontend process, fed by its own publishes and by ``hermes.idempotency``."""

    def __init__(self, producer: BrokerProducer, connection: KafkaConnection, admin: BrokerAdmin) -> None:
        self._producer = producer
        self._connection = connection
        self._admin = admin
        self._index: dict[int, int] = {}  # a key's digest: its first publish packed (or in flight: its body's digest)
        self._expiries: dict[str, _Expiries] = {}  # by topic, to forget keys whose window is over
        self._topics: dict[int, _TopicKeys] = {}  # by id(topic)
        self._waiting: dict[int, list[Answer]] = {}  # repeats of first publishes in flight, waiting for their answer
        self._outbox: list[Any] = []  # first publishes answered, not written yet: _ROW items each
        self._flushing: asyncio.TimerHandle | None = None
        self._writer = uuid.uuid4().hex.encode()  # its records' Kafka key: the follower skips them
        self._tasks: set[asyncio.Task[None]] = set()  # digests of spooled bodies
        self._stopping = threading.Event()
        self._follower: threading.Thread | None = None

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        """Whether ``<topic>/<key>`` is known here (and its window maybe over)."""
        if not isinstance(name, str):
            return False
        topic, _, key = name.partition("/")
        return _name_digest(topic, key) in self._index

    # --- the publish path ---

    def publish(
        self,
        produce: Produce,
        topic: Topic,
        message_id: str,
        body: bytes | SpooledBody,
        headers: Mapping[str, str],
        key: str,
        answer: Answer,
        digest: int | None = None,
    ) -> None:
        """Publishes the message with ``produce`` unless ``key`` is known: then ``answer`` gets the first publish's
        result (at once, or when its twin in flight here is answered). Raises what is wrong (400 for a key that is
        no key, 422 for a key used with another body). ``digest``: the body's, when it was taken already."""
        if digest is None:
            if not (0 < len(key) <= MAX_KEY_LENGTH and key.isprintable()):
                raise ValidationError(
                    f"must be 1 to {MAX_KEY_LENGTH} printable characters (a UUID, say)", IDEMPOTENCY_KEY_HEADER
                )
            if isinstance(body, SpooledBody):  # a large body is read in a thread
                spooled = self._publish_spooled(produce, topic, message_id, body, headers, key, answer)
                task = asyncio.get_running_loop().create_task(spooled)
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                return
            digest = xxhash.xxh3_64_intdigest(body)
        keyed = self._topics.get(id(topic))
        if keyed is None or keyed.topic is not topic:
            keyed = self._topic_keys(topic)
        named = xxhash.xxh3_128_intdigest(key.encode(), keyed.seed)  # as _name_digest
        index = self._index
        known = index.get(named)
        if known is not None:
            until = (known >> 1) & _UNTIL_MASK
            if until == 0 or until > time.time() * 1000:  # in flight here, or known within its window
                if (known >> _DIGEST_SHIFT) & _DIGEST_MASK != digest:
                    raise _reused(topic, key)
                if until == 0:
                    self._repeat(named, answer)
                else:
                    answer(PublishResult(_uuid_text(known >> _ID_SHIFT), known & 1 == 1, replayed=True))
                return
        index[named] = digest << _DIGEST_SHIFT  # in flight
        first = functools.partial(self._answered, named, digest, keyed, key, answer)
        try:
            produce(topic, message_id, body, headers, first)
        except Exception as exc:  # whatever refuses the message answers it through ``first``: its twins too
            first(exc)

    async def _publish_spooled(
        self,
        produce: Produce,
        topic: Topic,
        message_id: str,
        body: SpooledBody,
        headers: Mapping[str, str],
        key: str,
        answer: Answer,
    ) -> None:
        try:
            digest = await asyncio.to_thread(_spooled_digest, body)
            self.publish(produce, topic, message_id, body, headers, key, answer, digest)
        except Exception as exc:  # a task's error reaches nobody else: the request is answered with it
            answer(exc)

    def _topic_keys(self, topic: Topic) -> _TopicKeys:
        if len(self._topics) >= _TOPICS_KEPT:
            self._topics.clear()
        keyed = self._topics[id(topic)] = _TopicKeys(topic)  # it holds the topic: its id is not reused meanwhile
        return keyed

    def _repeat(self, named: int, answer: Answer) -> None:
        """A repeat of a first publish in flight here: answered as it was when it was answered since the last
        flush, else when it is."""
        outbox = self._outbox
        for row in range(0, len(outbox), _ROW):
            if outbox[row] == named:
                answer(PublishResult(outbox[row + 4], outbox[row + 5], replayed=True))
                return
        self._waiting.setdefault(named, []).append(answer)

    def _answered(
        self, named: int, digest: int, keyed: _TopicKeys, key: str, answer: Answer, outcome: PublishResult | Exception
    ) -> None:
        """A key's first publish is answered: kept (at the next flush) when it was accepted, else forgotten; repeats
        that came meanwhile get its answer (an error too: they may try again)."""
        if isinstance(outcome, PublishResult):
            outbox = self._outbox
            if not outbox:  # written with those answered meanwhile (this may run inside the producer's poll)
                self._flushing = asyncio.get_running_loop().call_later(_FLUSH_DELAY, self._flush)
            message_id, acknowledged, _ = outcome
            outbox += (named, digest, keyed, key, message_id, acknowledged)
        elif self._index.get(named) == digest << _DIGEST_SHIFT:  # not learnt from another frontend meanwhile
            del self._index[named]
        if self._waiting:
            waiting = self._waiting.pop(named, None)
            if waiting:
                repeat = outcome._replace(replayed=True) if isinstance(outcome, PublishResult) else outcome
                for waiter in waiting:
                    waiter(repeat)
        answer(outcome)

    def _flush(self) -> None:
        """Keeps the first publishes answered since the last flush, in bulk, and writes their record. Their windows
        end from now: up to 10 ms after their answers, so that a key is forgotten a little late, never early."""
        self._flushing = None
        answered, self._outbox = self._outbox, []
        now = int(time.time() * 1000)
        topics: list[_TopicKeys] = answered[2::_ROW]
        if not topics:
            return
        if topics.count(topics[0]) == len(topics):  # one topic (the usual): its columns are the outbox's slices
            self._keep(now, topics[0], *(answered[column::_ROW] for column in (0, 1, 3, 4, 5)))
        else:
            rows: dict[_TopicKeys, list[Any]] = {}
            for row in range(0, len(answered), _ROW):
                rows.setdefault(answered[row + 2], []).extend(answered[row : row + _ROW])
            for keyed, own in rows.items():
                self._keep(now, keyed, *(own[column::_ROW] for column in (0, 1, 3, 4, 5)))
        self._forget_expired()

    def _keep(
        self,
        now: int,
        keyed: _TopicKeys,
        nameds: list[int],
        digests: list[int],
        keys: list[str],
        ids: list[str],
        acknowledged: list[bool],
    ) -> None:
        """Keeps one topic's keys answered since the last flush and writes their record: columns, so that a key
        costs no string or tuple of its own here (a row per key took 1.2 µs of the flush per key)."""
        until = now + keyed.window_ms
        ends = (until << 1, until << 1 | 1)
        packed = [
            (int(m.replace("-", ""), 16) << _ID_SHIFT) | (d << _DIGEST_SHIFT) | ends[a]  # ids are UUIDs: ours
            for m, d, a in zip(ids, digests, acknowledged, strict=True)
        ]
        self._index.update(zip(nameds, packed, strict=True))
        self._expiring(keyed.name).append((until, tuple(nameds)))
        for start in range(0, len(nameds), _KEYS_PER_RECORD):
            end = start + _KEYS_PER_RECORD
            value = orjson.dumps(
                {
                    "topic": keyed.name,
                    "until": until,
                    "keys": keys[start:end],
                    "digests": digests[start:end],
                    "ids": ids[start:end],
                    "acknowledged": acknowledged[start:end],
                }
            )
            self._producer.produce(IDEMPOTENCY.name, value, _written, key=self._writer, ack=Ack.LEADER)

    def _expiring(self, topic: str) -> _Expiries:
        expiries = self._expiries.get(topic)
        if expiries is None:
            expiries = self._expiries[topic] = collections.deque()
        return expiries

    def _forget_expired(self) -> None:
        index, now = self._index, time.time() * 1000
        for topic, expiries in list(self._expiries.items()):
            while expiries and expiries[0][0] <= now:
                for named in expiries.popleft()[1]:
                    current = index.get(named)
                    if current is not None and 0 < _until(current) <= now:  # not in flight, nor answered again since
                        del index[named]
            if not expiries:
                del self._expiries[topic]

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
        now = int(time.time() * 1000)
        for record in records:
            try:
                keys = orjson.loads(record)
                if isinstance(keys, dict):
                    self._learn_columns(keys, now)
                else:  # a record of the version before, an entry per key
                    self._learn_entries([(str(n), str(d), int(s), str(m), int(u)) for n, d, s, m, u in keys], now)
            except (ValueError, TypeError, KeyError):
                log.debug("idempotency: a record of %s that holds no keys is ignored", IDEMPOTENCY.name)
        self._forget_expired()

    def _learn_columns(self, record: dict[str, Any], now: int) -> None:
        """A record as ``_keep`` writes it: one topic, one end of window, a column per field."""
        topic, until = str(record["topic"]), int(record["until"])
        if not now < until < _NEVER:
            return
        seed, index, nameds = _seed(topic), self._index, []
        keys, digests, ids, acknowledged = (record[c] for c in ("keys", "digests", "ids", "acknowledged"))
        for key, digest, message_id, acked in zip(keys, digests, ids, acknowledged, strict=True):
            if (
                isinstance(digest, int)
                and 0 <= digest <= _DIGEST_MASK
                and isinstance(acked, bool)
                and (bits := _uuid_bits(str(message_id))) is not None
            ):
                named = xxhash.xxh3_128_intdigest(str(key).encode(), seed)  # as _name_digest
                index[named] = _packed(bits, digest, until, acked)
                nameds.append(named)
        if nameds:
            self._expiring(topic).append((until, tuple(nameds)))

    def _learn_entries(self, entries: list[_Entry], now: int) -> None:
        index = self._index
        sharing: dict[tuple[str, int], list[int]] = {}  # the keys of one flush share their topic and end of window
        for name, digest, status, message_id, until in entries:
            if (
                now < until < _NEVER
                and status in (201, 202)
                and len(digest) == _DIGEST_LENGTH
                and (bits := _uuid_bits(message_id)) is not None
            ):
                try:
                    digested = int(digest, 16)
                except ValueError:
                    continue
                topic, _, key = name.partition("/")
                named = _name_digest(topic, key)
                index[named] = _packed(bits, digested, until, status == 201)
                sharing.setdefault((topic, until), []).append(named)
        for (topic, until), nameds in sharing.items():
            self._expiring(topic).append((until, tuple(nameds)))


def _reused(topic: Topic, key: str) -> IdempotencyKeyReused:
    return IdempotencyKeyReused(
        f"{IDEMPOTENCY_KEY_HEADER}: {key!r} was used on topic {topic.qualified_name} for a message with another "
        "body within the topic's idempotencyWindow; publish a new message with a new key"
    )


def _written(error: Exception | None) -> None:
    if error is not None:  # the publish itself succeeded: only a repeat of it will be published again
        log.warning("idempotency: recording a key in %s failed: %s", IDEMPOTENCY.name, error)

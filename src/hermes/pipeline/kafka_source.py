"""A Structured Streaming source for Kafka on PySpark's Python Data Source API (``format("hermes-kafka")``).

Spark's own Kafka connector is a JVM jar that pyspark does not ship, so this source reads Kafka with
confluent-kafka in Spark's Python workers. It is the one module outside ``hermes.broker`` that imports
confluent_kafka: its readers run in Spark's Python workers from options (strings) only, need an ``assign()``
range read that stops at a planned end offset, and a long-lived watermark client on the driver, none of which
``hermes.broker``'s group consumer or short-lived admin lookups provide.

Options (case-insensitive):
  ``bootstrap.servers``          the Kafka cluster (required)
  ``kafka.<librdkafka setting>`` passed to every client, e.g. ``kafka.security.protocol``, ``kafka.sasl.password``
  ``topics``                     comma-separated topic names (required; topics that do not exist yet are read
                                 from their earliest offset once they appear)
  ``startingOffsets``            ``earliest`` (default) or ``latest``, for a query without a checkpoint
  ``maxRecordsPerBatch``         at most this many records per micro-batch (default: all available)

Offsets are ``{"<topic>": {"<partition>": <next offset>}}`` with string keys in sorted order: Spark compares
offsets as JSON strings, so the order must be deterministic. The checkpoint is the only source of truth for
positions; nothing is committed to Kafka. A partition or topic the checkpoint does not know starts from its
earliest offset, so restarting a query with more topics reads the new ones from the beginning.

Rows follow the schema of Spark's Kafka source; ``headers`` is an array of (key, value) structs, like Spark's,
because Kafka headers are ordered and a name may repeat, which a map cannot hold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

log = logging.getLogger(__name__)

SOURCE_NAME = "hermes-kafka"

SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType(), False), StructField("value", BinaryType(), True)])),
            True,
        ),
    ]
)

_ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), False),
        pa.field("partition", pa.int32(), False),
        pa.field("offset", pa.int64(), False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string(), False), pa.field("value", pa.binary())]))),
    ]
)

Offsets = dict[str, dict[str, int]]

_ROWS_PER_ARROW_BATCH = 5000
_METADATA_REFRESH = 5.0  # seconds between topic/partition discoveries on the driver
_STARTED_OVER_AFTER = 30.0  # seconds a position must stay past a partition's end to count as a new topic
_READ_STALL_TIMEOUT = 60.0  # a task that sees no record for this long while data is due fails (Spark retries)


def _sorted(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {t: {p: offsets[t][p] for p in sorted(offsets[t], key=int)} for t in sorted(offsets)}


@dataclass(frozen=True)
class KafkaOptions:
    client_config: tuple[tuple[str, str], ...]
    topics: tuple[str, ...]
    starting: str
    max_records: int | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaOptions:
        lowered = {k.lower(): v for k, v in options.items()}
        servers = lowered.get("bootstrap.servers") or lowered.get("kafka.bootstrap.servers")
        if not servers:
            raise ValueError("the hermes-kafka source needs the option bootstrap.servers")
        config = {k[len("kafka.") :]: v for k, v in lowered.items() if k.startswith("kafka.")}
        config["bootstrap.servers"] = servers
        topics = tuple(sorted({t.strip() for t in lowered.get("topics", "").split(",") if t.strip()}))
        if not topics:
            raise ValueError("the hermes-kafka source needs the option topics (comma-separated topic names)")
        starting = lowered.get("startingoffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f"startingOffsets must be earliest or latest, not {starting!r}")
        raw_max = lowered.get("maxrecordsperbatch")
        max_records = int(raw_max) if raw_max else None
        if max_records is not None and max_records < 1:
            raise ValueError("maxRecordsPerBatch must be at least 1")
        return cls(tuple(sorted(config.items())), topics, starting, max_records)

    def consumer(self, **extra: Any) -> Any:
        return Consumer(
            {
                **dict(self.client_config),
                **extra,
                "group.id": "hermes-pipeline-source",  # required by librdkafka; never joined or committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                # a planned start below the log start (Kafka retention removed it) reads from what is left
                "auto.offset.reset": "earliest",
            }
        )


class KafkaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(KafkaOptions.parse(self.options))


@dataclass
class KafkaPartition(InputPartition):
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # read up to here, exclusive


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver side (offsets, planning) runs on one long-lived instance; ``read`` runs in executors on a
    pickled copy made at query start, so the driver's Kafka client is created lazily and never pickled."""

    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._consumer: Any = None
        self._partitions: dict[str, list[int]] = {}
        self._partitions_at = 0.0
        self._probe: Any = None
        self._checked_ends: dict[tuple[str, int], tuple[int, int]] = {}  # listed end -> true end
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past this
        self._past_end: dict[tuple[str, str], float] = {}  # since when a position is past its partition's end

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # --- driver ---
    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = self.options.consumer()
        return self._consumer

    def _topic_partitions(self) -> dict[str, list[int]]:
        now = time.monotonic()
        if now - self._partitions_at >= _METADATA_REFRESH or len(self._partitions) < len(self.options.topics):
            found: dict[str, list[int]] = {}
            metadata = self._client().list_topics(timeout=10)
            for topic in self.options.topics:
                described = metadata.topics.get(topic)
                if described is not None and described.error is None and described.partitions:
                    found[topic] = sorted(described.partitions)
            self._partitions, self._partitions_at = found, now
        return self._partitions

    def _watermarks(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Per partition (low, high). Some brokers (Tansu) answer a ListOffsets for the end with the base offset
        of the last record batch plus one, short of a multi-record batch's tail; a fetch from there reports
        the true end, so each new listed end is checked once by reading from it."""
        client = self._client()
        marks: dict[str, dict[str, tuple[int, int]]] = {}
        unchecked: list[tuple[str, int, int]] = []
        for topic, partitions in self._topic_partitions().items():
            for p in partitions:
                low, listed = client.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                checked = self._checked_ends.get((topic, p))
                if checked is not None and checked[0] == listed:
                    listed = checked[1]
                elif listed > low:
                    unchecked.append((topic, p, listed))
                marks.setdefault(topic, {})[str(p)] = (low, listed)
        for (topic, p), end in self._fetched_ends(unchecked).items():
            low, listed = marks[topic][str(p)]
            self._checked_ends[(topic, p)] = (listed, max(listed, end))
            marks[topic][str(p)] = (low, max(listed, end))
        return marks

    def _fetched_ends(self, listed: list[tuple[str, int, int]]) -> dict[tuple[str, int], int]:
        if not listed:
            return {}
        probe = self._probe
        if probe is None:
            probe = self._probe = self.options.consumer(**{"fetch.wait.max.ms": 10})
        probe.assign([TopicPartition(topic, p, end - 1) for topic, p, end in listed])
        ends: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + 10
        while len(ends) < len(listed) and time.monotonic() < deadline:
            for record in probe.consume(num_messages=1000, timeout=0.05):
                error = record.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    ends[(record.topic(), record.partition())] = record.offset()
        probe.unassign()
        return ends

    def initialOffset(self) -> Offsets:
        index = 1 if self.options.starting == "latest" else 0
        return _sorted({t: {p: w[index] for p, w in ps.items()} for t, ps in self._watermarks().items()})

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {t: {p: w[1] for p, w in ps.items()} for t, ps in self._watermarks().items()}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        positions: dict[tuple[str, str], int] = {}
        available: dict[tuple[str, str], int] = {}
        for topic, partitions in self._watermarks().items():
            for p, (low, high) in partitions.items():
                known = start.get(topic, {}).get(p)
                if known is None or self._started_over(topic, p, known, low, high):
                    # a partition joins at its earliest offset with nothing admitted; the next batch reads it
                    positions[(topic, p)], available[(topic, p)] = low, 0
                    continue
                begin = known
                until = high if self._target is None else min(high, self._target.get(topic, {}).get(p, begin))
                positions[(topic, p)] = begin
                available[(topic, p)] = max(0, until - begin)
        if isinstance(limit, ReadMaxRows):
            available = _share(available, limit.max_rows)
        end: dict[str, dict[str, int]] = {t: dict(ps) for t, ps in start.items()}  # keeps topics no longer read
        for (topic, p), begin in positions.items():
            end.setdefault(topic, {})[p] = begin + available[(topic, p)]
        return _sorted(end)

    def _started_over(self, topic: str, partition: str, known: int, low: int, high: int) -> bool:
        """True when a position has stayed past the partition's end for a while: the topic was deleted and
        created again, and its offsets start over. A moment past the end (a lagging leader) only waits."""
        if known <= high:
            self._past_end.pop((topic, partition), None)
            return False
        since = self._past_end.setdefault((topic, partition), time.monotonic())
        if time.monotonic() - since < _STARTED_OVER_AFTER:
            return False
        log.warning("%s[%s]: position %d stayed past the end %d: reading from %d", topic, partition, known, high, low)
        del self._past_end[(topic, partition)]
        return True

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaPartition]:
        # latestOffset adds a partition to an end offset with nothing admitted from it, so every partition
        # with records to read has a start
        planned = [
            KafkaPartition(topic, int(p), start.get(topic, {}).get(p, until), until)
            for topic, partitions in end.items()
            for p, until in partitions.items()
        ]
        return [p for p in planned if p.end > p.start]

    def commit(self, end: Offsets) -> None:
        """Positions live in the checkpoint; Kafka keeps nothing for this source."""

    def stop(self) -> None:
        for client in (self._consumer, self._probe):
            if client is not None:
                client.close()
        self._consumer = self._probe = None

    # --- executors ---
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaPartition)
        consumer = self.options.consumer()
        try:
            consumer.assign([TopicPartition(partition.topic, partition.partition, partition.start)])
            rows: list[Any] = []
            position = partition.start
            idle_since = time.monotonic()
            while position < partition.end:
                # asks for no more than are due, so consume() returns as soon as they are here, not at its timeout
                records = consumer.consume(num_messages=min(1000, partition.end - position), timeout=1.0)
                if not records:
                    if time.monotonic() - idle_since > _READ_STALL_TIMEOUT:
                        raise TimeoutError(
                            f"no record from {partition.topic}[{partition.partition}] at offset {position} "
                            f"within {_READ_STALL_TIMEOUT} s (reading up to {partition.end})"
                        )
                    continue
                idle_since = time.monotonic()
                for record in records:
                    error = record.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            position = partition.end  # fewer records than offsets (compaction, transactions)
                            break
                        raise KafkaException(error)
                    if record.offset() >= partition.end:
                        position = partition.end
                        break
                    position = record.offset() + 1
                    rows.append(record)
                if len(rows) >= _ROWS_PER_ARROW_BATCH:
                    yield _to_arrow(rows)
                    rows = []
            if rows:
                yield _to_arrow(rows)
        finally:
            consumer.close()


def _share(available: dict[tuple[str, str], int], budget: int) -> dict[tuple[str, str], int]:
    """Splits ``budget`` records fairly between partitions: each gets an equal share, and what a partition
    cannot use goes to the others (so a batch is full whenever that much data is available)."""
    granted = dict.fromkeys(available, 0)
    pending = sorted(available, key=lambda k: available[k])
    while pending and budget > 0:
        share = max(1, budget // len(pending))
        key = pending.pop(0)
        take = min(available[key], share, budget)
        granted[key] = take
        budget -= take
    return granted


def _to_arrow(records: list[Any]) -> pa.RecordBatch:
    timestamps: list[datetime | None] = []
    for record in records:
        kind, millis = record.timestamp()
        timestamps.append(datetime.fromtimestamp(millis / 1000, UTC) if kind != 0 and millis >= 0 else None)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.topic() for r in records], pa.string()),
            pa.array([r.partition() for r in records], pa.int32()),
            pa.array([r.offset() for r in records], pa.int64()),
            pa.array(timestamps, pa.timestamp("us", tz="UTC")),
            pa.array([r.key() for r in records], pa.binary()),
            pa.array([r.value() for r in records], pa.binary()),
            pa.array(
                [[{"key": k, "value": v} for k, v in (r.headers() or [])] for r in records], _ARROW_SCHEMA[6].type
            ),
        ],
        schema=_ARROW_SCHEMA,
    )

"""Benchmark of the archive (offline storage): throughput and publish-to-lake lag for 1 KB messages, beside a
plain Kafka consumer that writes the same rows to Parquet with pyarrow, in the same run and on the same
broker (a private embedded Kafka). The archive reads Kafka with Spark's connector, all in Spark's JVM.

- throughput: a backlog of ``messages`` records archived by an ``availableNow`` query. A cold run pays for the
  first query's start (class loading); ``SMALL_WARM_RUNS`` runs of ``SMALL_WARM_MESSAGES`` and ``WARM_RUNS``
  backlog runs warm the JVM's JIT up on Spark's and Delta's code, which settles slowly (a long-lived pipeline runs
  thousands of batches; after these runs the compiler still takes a sixth to a third of the JVM's CPU). Then
  ``MEASURED_RUNS`` backlog runs alternate with as many runs of the plain consumer reading the same number of
  records into the same layout, and the run of median wall time of each is reported: for the archive, wall time
  from the query's start to its end and the CPU time of Spark's JVM (driver and executors: local mode)
  meanwhile, also by thread (Spark's tasks, the JIT compiler, the garbage collector, the rest); for the plain
  consumer, wall time and this process's CPU time. The table's file count before and after Delta's OPTIMIZE is
  reported beside;
- lag: ``rate`` messages/s for ``seconds`` while the archive runs with its usual trigger (1 s); a message's
  lag is from its publish timestamp to the commit of the micro-batch that archived it (from the query's
  progress). The plain consumer's lag is from publish to the end of the Parquet write that holds it;
- burst: ``messages`` produced as fast as the producer goes while the archive runs with its usual trigger;
  each message's lag as above, and how long after the burst's last publish its last message was archived;
- offline retransmission of the measured backlog run's ``messages`` (:mod:`hermes.bench.lake_retransmission`);
- the file count of one topic-hour after a simulated hour of steady traffic and OPTIMIZE
  (:mod:`hermes.bench.lake_hour`).

Call ``archive_throughput()``; it returns a JSON-ready dict.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from hermes.bench.interrupt import alone
from hermes.bench.lake_hour import simulated_hour
from hermes.bench.lake_retransmission import RETRANSMISSION_TOPICS, retransmission
from hermes.bench.system import cpu_seconds, thread_cpu_seconds
from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker
from hermes.broker.kafka_consumer import BrokerConsumer
from hermes.broker.producer import BrokerProducer
from hermes.config import load_settings
from hermes.domain.message import Message, kafka_headers
from hermes.pipeline.lake import HOUR_PATTERN, Lake
from hermes.pipeline.lake_maintenance import optimize
from hermes.pipeline.offline_storage import start_archive
from hermes.pipeline.runner import PipelineContext
from hermes.pipeline.session import build_session

BODY = json.dumps({"payload": "x" * 990}).encode()  # ~1 KB


def _produce(
    connection: KafkaConnection, topic: str, count: int, rate: float | None = None
) -> dict[tuple[int, int], int]:
    """Produces ``count`` messages in the frontend's format (at ``rate``/s when given); returns their
    publish timestamps (ms) by (partition, offset)."""

    async def run() -> dict[tuple[int, int], int]:
        producer = BrokerProducer(connection)
        sent: list[tuple[int, asyncio.Future[Any]]] = []
        started = time.monotonic()
        for i in range(count):
            if rate is not None:
                await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            published = int(time.time() * 1000)
            headers = kafka_headers(str(uuid.uuid4()), published)
            sent.append((published, producer.send(topic, BODY, headers=headers)))
            if rate is None and len(sent) % 5000 == 0:
                await asyncio.gather(*(f for _, f in sent[-5000:]))
        reports = await asyncio.gather(*(f for _, f in sent))
        await asyncio.to_thread(producer.close)
        return {(r.partition, r.offset): published for (published, _), r in zip(sent, reports, strict=True)}

    return asyncio.run(run())


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    return {
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
        "max_ms": round(ordered[-1], 1),
    }


class _PlainArchiver:
    """The baseline: one confluent-kafka consumer, rows written to Parquet by pyarrow, partitioned like the lake."""

    def __init__(self, connection: KafkaConnection, topic: str, partitions: list[int], root: Path) -> None:
        self._consumer = BrokerConsumer(connection, f"bench-{uuid.uuid4().hex[:6]}")
        self._consumer.assign({(topic, p): 0 for p in partitions})
        self._root = root
        self.written: dict[tuple[int, int], float] = {}  # (partition, offset) -> wall time written (ms)

    def run(self, expected: int, flush_every: int = 5000, deadline: float = 300) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pending: list[Message] = []
        end = time.monotonic() + deadline
        while len(self.written) < expected and time.monotonic() < end:
            polled = self._consumer.poll(max_messages=1000, timeout=0.05)
            pending.extend(polled)
            if pending and (len(pending) >= flush_every or len(polled) < 1000):  # a full file, or caught up
                table = pa.table(
                    {
                        "message_id": [m.message_id for m in pending],
                        "publish_timestamp": pa.array(
                            [m.publish_timestamp for m in pending], pa.timestamp("ms", "UTC")
                        ),
                        "partition": pa.array([m.partition for m in pending], pa.int32()),
                        "offset": [m.offset for m in pending],
                        "key": pa.array([m.key for m in pending], pa.binary()),
                        "schema_version": pa.array([m.schema_version for m in pending], pa.int32()),
                        "headers": pa.array(
                            [list(m.propagated_headers.items()) for m in pending], pa.map_(pa.string(), pa.string())
                        ),
                        "body": pa.array([m.body for m in pending], pa.binary()),
                        "topic": [m.topic for m in pending],
                        "hour": [
                            datetime.fromtimestamp(m.publish_timestamp / 1000, UTC).strftime(HOUR_PATTERN)
                            for m in pending
                        ],
                    }
                )
                pq.write_to_dataset(table, str(self._root), partition_cols=["topic", "hour"])
                now = time.time() * 1000
                self.written.update({(m.partition, m.offset): now for m in pending})
                pending = []
        self._consumer.close()


def _context(spark: Any, connection: KafkaConnection, root: Path, name: str) -> PipelineContext:
    return PipelineContext(
        settings=load_settings({}),
        spark=spark,
        connection=connection,
        repository=None,  # type: ignore[arg-type]  # the archive query does not read metadata
        lake=Lake(str(root / f"lake-{name}")),
        checkpoints=str(root / f"checkpoints-{name}"),
        trigger_interval=1.0,
        max_records_per_batch=None,
        retention_interval=3600,
    )


def _files(lake: Lake) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(lake.root).file_uris())


def _batch_commits(query: Any) -> list[tuple[dict[str, int], float]]:
    """(end offsets by partition, commit wall time in ms) of each micro-batch that read rows."""
    out = []
    for progress in query.recentProgress:
        if not progress["numInputRows"]:
            continue
        end = progress["sources"][0]["endOffset"]
        end = json.loads(end) if isinstance(end, str) else end
        started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
        out.append(
            (
                {p: o for partitions in end.values() for p, o in partitions.items()},
                started + progress["durationMs"]["triggerExecution"],
            )
        )
    return out


# Warm-up after the cold run: small runs for the code that runs once per batch (planning, Delta's commit), then
# backlog runs for the code that runs per record, before the measured one
SMALL_WARM_RUNS, SMALL_WARM_MESSAGES = 30, 2000
WARM_RUNS = 5
MEASURED_RUNS = 3  # each of the archive and the plain consumer; the run of median wall time is reported

_Run = TypeVar("_Run", bound=tuple[Any, ...])


def _median_run(runs: list[_Run]) -> _Run:
    """The run of median wall time (its first field) of an odd number of runs."""
    return sorted(runs, key=lambda run: run[0])[len(runs) // 2]


# Parts of the JVM's thread names (digits read as N: "C2 CompilerThread0" is "CN CompilerThreN"). The serial
# collector collects in the "VM Thread" (which also runs the JVM's other, brief, stop-the-world operations)
_THREADS = {"Executor task": "tasks", "CompilerThre": "jit", "GC Thread": "gc", "GN ": "gc", "VM Thread": "gc"}


def _by_thread(before: dict[str, float], after: dict[str, float], total: float) -> dict[str, float]:
    """The JVM's CPU seconds between two ``thread_cpu_seconds``, by kind of thread; ``total``: all of it, so the
    rest (threads that ended meanwhile included) is "other"."""
    out = dict.fromkeys(("tasks", "jit", "gc"), 0.0)
    for name, seconds in after.items():
        kind = next((k for part, k in _THREADS.items() if part in name), None)
        if kind is not None:
            out[kind] += seconds - before.get(name, 0.0)
    return {**out, "other": total - sum(out.values())}


def _lag(query: Any, published: dict[tuple[int, int], int], deadline: float = 180) -> list[float]:
    """Waits until ``query`` archived every message of ``published``; each one's lag (ms)."""
    expected: dict[int, int] = {}  # partition -> its next offset after the last published
    for partition, offset in published:
        expected[partition] = max(expected.get(partition, 0), offset + 1)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        commits = _batch_commits(query)
        if commits and all(commits[-1][0].get(str(p), 0) >= o for p, o in expected.items()):
            break
        time.sleep(0.2)
    commits = _batch_commits(query)
    return [
        next(t for ends, t in commits if ends.get(str(partition), 0) > offset) - published_ms
        for (partition, offset), published_ms in published.items()
    ]


def _plain_lag(connection: KafkaConnection, topic: str, root: Path, count: int, rate: float | None) -> list[float]:
    archiver = _PlainArchiver(connection, topic, [0, 1], root)
    worker = threading.Thread(target=archiver.run, args=(count,), kwargs={"flush_every": 1000})
    worker.start()
    published = _produce(connection, topic, count, rate)
    worker.join(180)
    return [archiver.written[k] - v for k, v in published.items() if k in archiver.written]


def archive_throughput(
    messages: int = 100_000,
    rate: float = 500,
    seconds: float = 10,
    master: str = "local[2]",
    hour_rate: float = 100,
) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="hermes-archive-bench-"))
    broker = EmbeddedBroker(root / "kafka")
    spark = None
    try:
        connection = KafkaConnection(broker.start())
        with BrokerAdmin(connection) as admin:
            for topic in ("bench.backlog", "bench.live", "bench.plain", "bench.burst", *RETRANSMISSION_TOPICS):
                admin.create_topic(topic, 2)
        _produce(connection, "bench.backlog", messages)
        spark = build_session(master=master, local_dir=root / "spark")
        jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())

        backlog = _context(spark, connection, root, "backlog")

        def archive_backlog() -> None:
            start_archive(backlog, ["bench.backlog"], {"availableNow": True}).awaitTermination()

        started = time.monotonic()
        archive_backlog()
        cold_seconds = time.monotonic() - started  # includes the first query's start
        for _ in range(SMALL_WARM_RUNS):
            _produce(connection, "bench.backlog", SMALL_WARM_MESSAGES)
            archive_backlog()
        for _ in range(WARM_RUNS):
            _produce(connection, "bench.backlog", messages)
            archive_backlog()
        spark_runs, plain_runs = [], []
        for run in range(MEASURED_RUNS):  # alternating, so that both see the same conditions
            measured = _produce(connection, "bench.backlog", messages)
            threads, cpu, started = thread_cpu_seconds(jvm), cpu_seconds(jvm), time.monotonic()
            archive_backlog()
            spark_seconds, spark_cpu = time.monotonic() - started, cpu_seconds(jvm) - cpu
            spark_runs.append((spark_seconds, spark_cpu, _by_thread(threads, thread_cpu_seconds(jvm), spark_cpu)))
            plain = _PlainArchiver(connection, "bench.backlog", [0, 1], root / f"plain-backlog-{run}")
            cpu, started = time.process_time(), time.monotonic()
            plain.run(messages)
            plain_runs.append((time.monotonic() - started, time.process_time() - cpu))
        spark_seconds, spark_cpu, spark_threads = _median_run(spark_runs)
        plain_seconds, plain_cpu = _median_run(plain_runs)
        files_before = _files(backlog.lake)
        started = time.monotonic()
        optimize(spark, backlog.lake)
        optimize_seconds = time.monotonic() - started
        files_after = _files(backlog.lake)

        live = start_archive(_context(spark, connection, root, "live"), ["bench.live"])
        _produce(connection, "bench.live", 20)  # warm-up: a query's first batch is slow
        while not _batch_commits(live):
            time.sleep(0.2)
        count = int(rate * seconds)
        spark_lag = _lag(live, _produce(connection, "bench.live", count, rate))
        started = time.monotonic()
        burst = _produce(connection, "bench.live", messages)
        burst_seconds = time.monotonic() - started
        burst_lag = _lag(live, burst)
        burst_end = max(p + lag for p, lag in zip(burst.values(), burst_lag, strict=True))  # last commit (ms)
        live.stop()
        plain_lag = _plain_lag(connection, "bench.plain", root / "plain-live", count, rate)
        plain_burst_lag = _plain_lag(connection, "bench.burst", root / "plain-burst", messages, None)

        retransmitted = retransmission(spark, jvm, connection, backlog.lake, "bench.backlog", measured, BODY)
        hour = simulated_hour(spark, backlog.lake, "bench.hour", hour_rate, BODY, backlog.trigger_interval)
        return {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
            "message_bytes": len(BODY),
            "throughput": {
                "messages": messages,
                "spark_archive_per_s": round(messages / spark_seconds),
                "spark_archive_cpu_us_per_message": round(spark_cpu / messages * 1e6, 1),
                "spark_archive_cpu_us_per_message_by_thread": {
                    kind: round(seconds / messages * 1e6, 1) for kind, seconds in spark_threads.items()
                },
                "spark_archive_per_s_runs": [round(messages / run[0]) for run in spark_runs],
                "spark_archive_cold_run_s": round(cold_seconds, 1),
                "plain_consumer_pyarrow_per_s": round(messages / plain_seconds),
                "plain_consumer_pyarrow_per_s_runs": [round(messages / run[0]) for run in plain_runs],
                "plain_cpu_us_per_message": round(plain_cpu / messages * 1e6, 1),
            },
            "compaction": {
                "messages": (WARM_RUNS + MEASURED_RUNS + 1) * messages + SMALL_WARM_RUNS * SMALL_WARM_MESSAGES,
                "files_before": files_before,
                "files_after_optimize": files_after,
                "optimize_s": round(optimize_seconds, 1),
            },
            "lag": {
                "rate_per_s": rate,
                "messages": count,
                "spark_archive": _percentiles(spark_lag),
                "plain_consumer_pyarrow": _percentiles(plain_lag),
            },
            "burst": {
                "messages": messages,
                "produced_in_s": round(burst_seconds, 1),
                "spark_archive": _percentiles(burst_lag),
                "spark_archived_after_last_publish_s": round((burst_end - max(burst.values())) / 1000, 1),
                "plain_consumer_pyarrow": _percentiles(plain_burst_lag),
            },
            "retransmission": retransmitted,
            "hour": hour,
        }
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    alone(lambda: print(json.dumps(archive_throughput(), indent=2)))

"""Scenario 6's offline retransmission: archived messages republished from the lake to a topic by the pipeline's
own task runner (:func:`hermes.pipeline.retransmission.run_task`: a pinned table version, a count per hour,
then each hour's rows produced from Spark's Python workers, acknowledged by all in-sync replicas), beside

- a plain loop doing the same without Spark: the same rows read with ``deltalake`` and produced with one
  confluent-kafka producer (acks all);
- the raw POST loop: the same number of 1 KB POSTs to a local subscriber endpoint, 100 in flight, with the
  consumers' HTTP client (scenario 2's delivery ceiling): what delivering the retransmitted messages would
  need at least.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from hermes.bench.load import Sink, publish_count
from hermes.bench.system import tree_cpu_seconds
from hermes.broker.connection import KafkaConnection
from hermes.domain.message import kafka_headers
from hermes.domain.names import TopicName
from hermes.domain.retransmission_task import RetransmissionTask
from hermes.pipeline.lake import Lake
from hermes.pipeline.retransmission import run_task

RETRANSMISSION_TOPICS = ("bench.retransmitted", "bench.retransmitted-plain")  # the task's target, the plain loop's
_MARGIN = timedelta(milliseconds=500)  # around the range's first and last publish time: no float edge cuts one


def _task(source: str, target: str, first_ms: int, last_ms: int) -> RetransmissionTask:
    def at(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC)

    return RetransmissionTask(
        task_id=f"bench-{uuid.uuid4().hex[:8]}",
        source_topic=TopicName.parse(source),
        target_topic=TopicName.parse(target),
        start=at(first_ms) - _MARGIN,
        end=at(last_ms) + _MARGIN,
        created_at=datetime.now(UTC),
    )


def _plain(connection: KafkaConnection, lake: Lake, source: str, target: str, first_ms: int, last_ms: int) -> int:
    """The ceiling without Spark: the range's rows from the table's files, produced by one producer."""
    import pyarrow.compute as pc
    from confluent_kafka import Producer
    from deltalake import DeltaTable

    start = datetime.fromtimestamp(first_ms / 1000, UTC) - _MARGIN
    end = datetime.fromtimestamp(last_ms / 1000, UTC) + _MARGIN
    table = DeltaTable(lake.root).to_pyarrow_table(partitions=[("topic", "=", source)])
    stamps = table.column("publish_timestamp")
    table = table.filter(pc.and_(pc.greater_equal(stamps, start), pc.less(stamps, end)))
    producer = Producer({"bootstrap.servers": connection.bootstrap_servers, "acks": "all", "linger.ms": 5})
    sent = 0
    for row in table.select(["message_id", "publish_timestamp", "key", "schema_version", "body"]).to_pylist():
        published = int(row["publish_timestamp"].timestamp() * 1000)
        headers: list[tuple[str, str | bytes | None]] = [
            *kafka_headers(row["message_id"], published, row["schema_version"], {})
        ]
        while True:
            try:
                producer.produce(target, row["body"], key=row["key"], headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        sent += 1
    if producer.flush(60):
        raise RuntimeError("the plain producer did not deliver every message within 60 s")
    return sent


async def _raw_posts(count: int, body: bytes) -> float:
    sink = Sink()
    await sink.start()
    try:
        started = time.monotonic()
        sent = await publish_count(sink.url("raw"), body, count, 100)
        return len(sent.completed_at) / (time.monotonic() - started)
    finally:
        await sink.stop()


def retransmission(
    spark: Any,
    jvm_pid: int,
    connection: KafkaConnection,
    lake: Lake,
    source: str,
    published: dict[Any, int],
    body: bytes,
) -> dict[str, Any]:
    """Republishes the messages published at ``published``'s times (all of them archived to ``lake``, and
    nothing else of ``source`` within half a second of them) to ``RETRANSMISSION_TOPICS`` (created
    beforehand), once with the pipeline's task and once with the plain loop; then the raw POST loop of as many
    messages."""
    first, last = min(published.values()), max(published.values())
    task = _task(source, RETRANSMISSION_TOPICS[0], first, last)
    cpu, started = tree_cpu_seconds(jvm_pid), time.monotonic()
    sent = run_task(spark, lake, connection, task, lambda done, total: None)
    seconds, cpu = time.monotonic() - started, tree_cpu_seconds(jvm_pid) - cpu
    if sent != len(published):
        raise RuntimeError(f"the retransmission sent {sent} messages, not {len(published)}")
    plain_cpu, started = time.process_time(), time.monotonic()
    plain_sent = _plain(connection, lake, source, RETRANSMISSION_TOPICS[1], first, last)
    plain_seconds, plain_cpu = time.monotonic() - started, time.process_time() - plain_cpu
    return {
        "messages": sent,
        "spark_task_per_s": round(sent / seconds),
        "spark_task_cpu_us_per_message": round(cpu / sent * 1e6, 1),
        "plain_deltalake_producer_per_s": round(plain_sent / plain_seconds),
        "plain_cpu_us_per_message": round(plain_cpu / plain_sent * 1e6, 1),
        "raw_post_loop_per_s": round(asyncio.run(_raw_posts(sent, body))),
    }

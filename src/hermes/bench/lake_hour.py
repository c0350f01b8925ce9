"""Scenario 6's file count: one topic-hour of the lake after an hour of steady traffic and a compaction.

An hour of the archive is too long for a benchmark, so the hour's files are made without waiting for it: the
files of as many micro-batches as an hour holds at the trigger interval (3,600 at the default 1 s), one Parquet
file per Kafka partition a batch, which is what the archive writes for a batch (a task per
Kafka partition with new records, each writing one file per topic-hour; the backlog runs of
:mod:`hermes.bench.archive` show the same: 2 files a batch on 2 partitions). The rows are the archive's columns
with 1 KB bodies, their publish timestamps spread evenly over one past UTC hour at ``rate`` messages/s. The
files are written with pyarrow and committed with ``deltalake``, into a table the archive itself created, one
commit per simulated minute rather than per batch: the files are the hour's, the log has fewer entries (a
commit per batch took ``deltalake`` longer with every commit, minutes in all). Then the pipeline's own compaction
(:func:`hermes.pipeline.lake_maintenance.optimize`, Delta's OPTIMIZE in Spark) runs, and the hour's files are
counted in the table's newest version.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hermes.pipeline.lake import HOUR_PATTERN, Lake
from hermes.pipeline.lake_maintenance import optimize

SECONDS = 3600
COMMIT_SECONDS = 60  # the simulated seconds a commit holds


def _batch_table(body: bytes, partition: int, first_offset: int, timestamps_ms: list[int]) -> Any:
    import pyarrow as pa

    count = len(timestamps_ms)
    return pa.table(
        {
            "message_id": [str(uuid.uuid4()) for _ in range(count)],
            "publish_timestamp": pa.array([t * 1000 for t in timestamps_ms], pa.timestamp("us", "UTC")),
            "partition": pa.array([partition] * count, pa.int32()),
            "offset": pa.array(range(first_offset, first_offset + count), pa.int64()),
            "key": pa.array([None] * count, pa.binary()),
            "schema_version": pa.array([None] * count, pa.int32()),
            "headers": pa.array([[]] * count, pa.map_(pa.string(), pa.string())),
            "body": pa.array([body] * count, pa.binary()),
        }
    )


def write_hour(
    lake: Lake, topic: str, hour: datetime, rate: float, body: bytes, trigger_interval: float = 1.0, partitions: int = 2
) -> dict[str, Any]:
    """Appends ``hour``'s micro-batches of ``topic`` to the table at ``lake`` (local, existing): one file per
    Kafka partition a batch, ``rate`` messages/s in all, a commit per ``COMMIT_SECONDS``. Returns what was
    written."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    table = DeltaTable(lake.root)
    schema = table.schema()
    name = hour.strftime(HOUR_PATTERN)
    directory = Path(lake.root) / f"topic={topic}" / f"hour={name}"
    directory.mkdir(parents=True, exist_ok=True)
    batches = int(SECONDS / trigger_interval)
    start_ms = int(hour.timestamp() * 1000)
    offsets = [0] * partitions
    messages = written_bytes = 0
    adds: list[AddAction | RemoveAction] = []
    for batch in range(batches):
        first = round(batch * trigger_interval * rate)
        count = round((batch + 1) * trigger_interval * rate) - first
        for partition in range(partitions):
            share = range(first + partition, first + count, partitions)  # round-robin over the partitions
            if not share:
                continue
            timestamps = [start_ms + int(i * 1000 / rate) for i in share]
            path = f"topic={topic}/hour={name}/part-{uuid.uuid4()}.snappy.parquet"
            pq.write_table(_batch_table(body, partition, offsets[partition], timestamps), Path(lake.root) / path)
            offsets[partition] += len(share)
            size = (Path(lake.root) / path).stat().st_size
            stats = json.dumps({"numRecords": len(share)})
            adds.append(AddAction(path, size, {"topic": topic, "hour": name}, int(time.time() * 1000), True, stats))
            messages += len(share)
            written_bytes += size
        if adds and (batch + 1 == batches or (batch + 1) * trigger_interval % COMMIT_SECONDS == 0):
            table.create_write_transaction(adds, "append", schema, partition_by=["topic", "hour"])
            adds = []
    return {"batches": batches, "messages": messages, "files": _hour_files(lake, topic, name), "bytes": written_bytes}


def _hour_files(lake: Lake, topic: str, hour: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(lake.root).file_uris(file_pruning_predicate=[("topic", "=", topic), ("hour", "=", hour)]))


def simulated_hour(
    spark: Any, lake: Lake, topic: str, rate: float, body: bytes, trigger_interval: float
) -> dict[str, Any]:
    """The file count of the past UTC hour of ``topic`` after writing an hour of ``rate`` messages/s and
    compacting the table (``lake`` must exist: the archive created it)."""
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    started = time.monotonic()
    written = write_hour(lake, topic, hour, rate, body, trigger_interval)
    write_seconds = time.monotonic() - started
    started = time.monotonic()
    optimize(spark, lake)
    return {
        "rate_per_s": rate,
        "trigger_interval_s": trigger_interval,
        "micro_batches": written["batches"],
        "messages": written["messages"],
        "megabytes": round(written["bytes"] / 1e6, 1),
        "files_before": written["files"],
        "files_after_optimize": _hour_files(lake, topic, hour.strftime(HOUR_PATTERN)),
        "optimize_s": round(time.monotonic() - started, 1),
        "write_s": round(write_seconds, 1),
    }

"""The file-count benchmark's simulated hour (hermes.bench.lake_hour): the files an hour of micro-batches
leaves in one topic-hour of a Delta table, written with deltalake alone (no Spark)."""

from datetime import UTC, datetime
from pathlib import Path

from deltalake import DeltaTable, write_deltalake

from hermes.bench.lake_hour import _batch_table, write_hour
from hermes.pipeline.lake import Lake


def test_an_hour_of_micro_batches_leaves_one_file_per_partition_and_batch_within_the_hour(tmp_path: Path) -> None:
    empty = _batch_table(b"", 0, 0, [0]).slice(0, 0)
    empty = empty.append_column("topic", empty.column("message_id")).append_column("hour", empty.column("message_id"))
    write_deltalake(str(tmp_path), empty, partition_by=["topic", "hour"])
    hour = datetime(2026, 1, 1, 5, tzinfo=UTC)

    written = write_hour(Lake(str(tmp_path)), "g.t", hour, rate=0.5, body=b"x", trigger_interval=60, partitions=2)

    assert written["batches"] == 60  # an hour at 60-second triggers
    assert written["messages"] == 1800  # 0.5 msg/s for an hour
    assert written["files"] == 120  # both Kafka partitions have records in every batch
    rows = DeltaTable(str(tmp_path)).to_pyarrow_table().to_pylist()
    assert len(rows) == 1800
    assert {r["hour"] for r in rows} == {"2026-01-01-05"}
    stamps = sorted(r["publish_timestamp"] for r in rows)
    assert stamps[0] == hour and stamps[-1] < datetime(2026, 1, 1, 6, tzinfo=UTC)
    assert {(r["partition"], r["offset"]) for r in rows} == {(p, o) for p in (0, 1) for o in range(900)}

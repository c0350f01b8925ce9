"""The scenarios whose measuring lives beside the code it measures (BATCH delivery in ``hermes.bench.batch``,
the Spark archive in ``hermes.bench.archive``), and the ceilings that need no Hermes."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from hermes.bench.stats import summarize


def batch(management: str, frontend: str, consumers_pid: int, quick: bool) -> dict[str, Any]:
    """Scenario 3: BATCH delivery throughput at batchSize 100 (1 KB messages), on the system under test."""
    from hermes.bench.batch import batch_throughput

    messages = 5_000 if quick else 20_000
    try:
        return asyncio.run(batch_throughput(management, frontend, messages, consumer_pid=consumers_pid))
    except Exception as exc:  # a failing scenario is reported, it does not void the others
        return {"error": f"{type(exc).__name__}: {exc}"}


def archive() -> dict[str, Any]:
    """Scenario 6: Spark archive throughput and lag, beside a plain consumer writing Parquet (its own broker)."""
    try:
        from hermes.bench.archive import archive_throughput
    except ImportError:
        return {"available": False, "note": "the spark extra is not installed"}
    try:
        return {"available": True, **archive_throughput()}
    except Exception as exc:
        return {"available": True, "error": f"{type(exc).__name__}: {exc}"}


def pyarrow_writer(rows: int, reps: int) -> dict[str, Any]:
    """The archive ceiling: a plain pyarrow Parquet writer of ``rows`` 1 KB records (id, timestamp, body)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return {"available": False, "note": "pyarrow is not installed (the spark extra)"}
    body = b"x" * 1024
    rates = []
    with tempfile.TemporaryDirectory(prefix="hermes-bench-parquet-") as directory:
        for rep in range(reps):
            started = time.perf_counter()
            table = pa.table(
                {
                    "message_id": [f"m{i}" for i in range(rows)],
                    "timestamp": list(range(rows)),
                    "body": [body] * rows,
                }
            )
            pq.write_table(table, Path(directory) / f"part-{rep}.parquet")
            rates.append(rows / (time.perf_counter() - started))
    return {"available": True, "rows": rows, "throughput": summarize(rates)}

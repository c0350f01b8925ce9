"""Scenarios other branches provide (BATCH delivery, Spark archive) and the ceilings that need no Hermes.

INTEGRATION POINTS: ``batch`` calls ``hermes.bench.batch.batch_throughput`` (branch oauth) and ``archive``
calls the first of ``_ARCHIVE_FUNCTIONS`` that exists (branch pipeline). Until those are merged the report
says "not available" for them; nothing else depends on them.
"""

from __future__ import annotations

import importlib
import inspect
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes.bench.stats import summarize

_BATCH_FUNCTION = ("hermes.bench.batch", "batch_throughput")
_ARCHIVE_FUNCTIONS = [
    ("hermes.pipeline.bench", "archive_throughput"),
    ("hermes.bench.archive", "archive_throughput"),
]


def _find(module: str, name: str) -> Callable[..., Any] | None:
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return found if callable(found) else None


def _call(function: Callable[..., Any], **wanted: Any) -> Any:
    """Calls ``function`` with those of ``wanted`` it takes by name (their signatures are theirs to choose)."""
    parameters = inspect.signature(function).parameters
    return function(**{k: v for k, v in wanted.items() if k in parameters})


def batch(bootstrap: str, quick: bool) -> dict[str, Any]:
    """Scenario 3: BATCH delivery throughput at batchSize 100 (1 KB messages)."""
    function = _find(*_BATCH_FUNCTION)
    if function is None:
        return {"available": False, "note": "hermes.bench.batch.batch_throughput is not in this build"}
    try:
        return {"available": True, **_call(function, bootstrap_servers=bootstrap, quick=quick)}
    except Exception as exc:  # a failing optional scenario is reported, it does not void the others
        return {"available": True, "error": f"{type(exc).__name__}: {exc}"}


def archive(bootstrap: str, quick: bool) -> dict[str, Any]:
    """Scenario 6: Spark archive throughput and lag."""
    for module, name in _ARCHIVE_FUNCTIONS:
        function = _find(module, name)
        if function is not None:
            try:
                return {
                    "available": True,
                    "source": f"{module}.{name}",
                    **_call(function, bootstrap_servers=bootstrap, quick=quick),
                }
            except Exception as exc:
                return {"available": True, "error": f"{type(exc).__name__}: {exc}"}
    return {"available": False, "note": "no archive benchmark function in this build (branch pipeline)"}


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

"""The Spark driver gives back the heap a backlog grew once the pipeline has been idle (pipeline/driver_heap.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from hermes.pipeline.driver_heap import HeapRelease, activity
from tests.conftest import wait_until

MIB = 1 << 20


def _bounds(jvm: Any) -> tuple[str, str]:
    diagnostics = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    return tuple(diagnostics.getVMOption(name).getValue() for name in ("MinHeapFreeRatio", "MaxHeapFreeRatio"))


def _grow_heap(spark: Any, mib: int) -> int:
    """Holds ``mib`` MiB in the driver through a full collection (which sizes the heap to keep 40-70 % free around
    them, as an archive batch of a backlog does), then lets them go. Returns the heap's committed bytes. Arrays of
    longs: py4j would copy a byte array to Python."""
    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    held = [jvm.java.lang.reflect.Array.newInstance(jvm.java.lang.Long.TYPE, 2 * MIB) for _ in range(mib // 16)]
    jvm.java.lang.System.gc()
    for array in held:
        gateway.detach(array)
    return int(jvm.java.lang.Runtime.getRuntime().totalMemory())


def test_an_idle_driver_gives_back_what_its_heap_grew_and_keeps_its_bounds(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    bounds = _bounds(jvm)
    grown = _grow_heap(spark, 320)
    release = HeapRelease(SimpleNamespace(settings=SimpleNamespace(pipeline_heap_release_after=1.0), spark=spark))
    began = time.monotonic()
    release.start()
    try:
        wait_until(lambda: release.releases == 1, timeout=60)
    finally:
        release.stop()
    assert time.monotonic() - began >= 1.0  # not before the idle delay
    committed = int(jvm.java.lang.Runtime.getRuntime().totalMemory())
    assert committed < grown - 200 * MIB, (grown >> 20, committed >> 20)
    assert _bounds(jvm) == bounds  # the next backlog grows the heap as before


def test_a_job_is_activity_and_a_delay_of_0_turns_the_release_off(spark: Any) -> None:
    before = activity(spark)
    spark.range(1000).count()
    wait_until(lambda: activity(spark) not in (None, before), timeout=30)  # Spark's status store lags its jobs
    off = HeapRelease(SimpleNamespace(settings=SimpleNamespace(pipeline_heap_release_after=0), spark=spark))
    off.start()
    assert not off._thread.is_alive()
    off.stop()

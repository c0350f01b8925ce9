"""The Spark driver's heap at rest: what a backlog grew goes back to the system once the pipeline is idle.

The driver's heap keeps 40-70 % free after a full collection, the room an archive batch of a backlog needs
(session.py). Idle, that room is 100-200 MiB of the install's memory held for nothing, and the serial collector
gives it back only at a full collection, which an idle driver rarely has. So after ``pipeline_heap_release_after``
seconds without a Spark job or a streaming micro-batch, the driver is collected in full with the free-heap bounds
lowered, then the bounds are put back: the next backlog grows the heap again as before.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from hermes.pipeline.job import LoopingJob

if TYPE_CHECKING:
    from hermes.pipeline.runner import PipelineContext

log = logging.getLogger(__name__)

_KEPT_FREE = "10"  # % of the heap left free by the give-back
# The serial collector shrinks in steps over consecutive collections that find too much free (none, 10 %, 40 %, then
# all of it), so that a program calling System.gc() between phases does not shrink what it needs again at once.
_COLLECTIONS = 4
_LONGEST_CHECK = 5.0  # seconds between looks at Spark's activity


def activity(spark: Any) -> tuple[Any, ...] | None:
    """What changes while the pipeline works: the newest Spark job outside a job group (retransmission, the lake's
    upkeep) and each streaming query's last micro-batch (its jobs are in the query's group). None while a job runs."""
    tracker = spark.sparkContext.statusTracker()
    if tracker.getActiveJobsIds():
        return None
    batches = []
    for query in spark.streams.active:
        progress = query.lastProgress
        batches.append((str(query.id), None if progress is None else progress["batchId"]))
    return max(tracker.getJobIdsForGroup(None), default=-1), tuple(sorted(batches))


def release_heap(jvm: Any) -> tuple[int, int]:
    """Collects the driver JVM's heap in full, keeping only ``_KEPT_FREE`` % of it free, then puts its free-heap
    bounds back (both are manageable at run time). Returns the heap's committed bytes before and after."""
    runtime = jvm.java.lang.Runtime.getRuntime()
    diagnostics = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    low = diagnostics.getVMOption("MinHeapFreeRatio").getValue()
    high = diagnostics.getVMOption("MaxHeapFreeRatio").getValue()
    before = int(runtime.totalMemory())
    diagnostics.setVMOption("MinHeapFreeRatio", "0")  # the lower bound first: it may never exceed the upper
    diagnostics.setVMOption("MaxHeapFreeRatio", _KEPT_FREE)
    try:
        for _ in range(_COLLECTIONS):
            jvm.java.lang.System.gc()
    finally:
        diagnostics.setVMOption("MaxHeapFreeRatio", high)
        diagnostics.setVMOption("MinHeapFreeRatio", low)
    return before, int(runtime.totalMemory())


class HeapRelease(LoopingJob):
    """Gives the driver's heap back once per idle period of ``pipeline_heap_release_after`` seconds (0: never).
    Runs beside the jobs of a classic session; a Spark Connect client has no driver of its own."""

    name = "driver-heap"

    def __init__(self, context: PipelineContext) -> None:
        super().__init__(context)
        self._after = context.settings.pipeline_heap_release_after
        self._seen: tuple[Any, ...] | None = None
        self._since = time.monotonic()
        self._released = False
        self.releases = 0

    def start(self) -> None:
        if self._after > 0:
            super().start()

    def step(self) -> float:
        spark = self._context.spark
        seen, now = activity(spark), time.monotonic()
        if seen is None or seen != self._seen:
            self._seen, self._since, self._released = seen, now, False
        elif not self._released and now - self._since >= self._after:
            self._released = True
            try:
                before, after = release_heap(spark.sparkContext._jvm)
            except Exception as exc:  # py4j's: a JVM without HotSpot's manageable flags; tried again next idle period
                log.warning("pipeline: the Spark driver's heap could not be given back: %s", exc)
                return _LONGEST_CHECK
            self.releases += 1
            log.info("pipeline idle for %.0f s: driver heap %d -> %d MiB", self._after, before >> 20, after >> 20)
        return min(self._after / 4, _LONGEST_CHECK)

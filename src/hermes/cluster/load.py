"""A process's load, as its members report it to ZooKeeper.

The figure that drives decisions is ``cpu``: the process's CPU time per second of wall time, smoothed. A
consumers (or frontend) process is one Python event loop, held to one core by the GIL, and that core is what
runs out first: waiting on subscribers costs nothing, parsing, filtering and HTTP bookkeeping do. Deliveries
per second are reported too (and pick the subscription to move off an overloaded node), but they do not
compare across subscriptions (a batch of 100 vs one message, a filter that drops most). Memory is reported
for the operator; it is bounded per subscription by the read-ahead settings and decides nothing.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

# Weight of the newest sample in the smoothed CPU figure: a few reports in a row must agree before a node counts
# as overloaded or idle (part of the hysteresis of rebalancing).
SMOOTHING = 0.3
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except OSError:  # no procfs: the peak is the best figure there is
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class LoadMeter:
    def __init__(self) -> None:
        self._cpu_at = time.process_time()
        self._wall_at = time.monotonic()
        self.cpu: float | None = None

    def sample(self) -> dict[str, Any]:
        cpu, wall = time.process_time(), time.monotonic()
        used = (cpu - self._cpu_at) / max(wall - self._wall_at, 1e-3)
        self._cpu_at, self._wall_at = cpu, wall
        self.cpu = used if self.cpu is None else SMOOTHING * used + (1 - SMOOTHING) * self.cpu
        return {"cpu": round(self.cpu, 4), "memoryBytes": _rss_bytes()}

"""One Ctrl-C stops a benchmark scenario run alone: at once, though it is in the middle of its rounds' blocking
wrk runs, with every process it started (the broker, the role processes, the frontends beside, wrk) gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _session(sid: int) -> dict[int, str]:
    """The processes of session ``sid`` (not zombies), by pid: their command line."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                found[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
    return found


def test_one_sigint_stops_publish_overhead_and_everything_it_started() -> None:
    argv = [sys.executable, "-m", "hermes.bench.publish_overhead", "2", "20", "16"]
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True) as bench:

        def measuring() -> bool:  # a round's wrk run: not the warm-up's 1 s ones
            return any(" -d2s " in line for line in _session(bench.pid).values())

        try:
            wait_until(measuring, timeout=240, interval=0.2)
            os.kill(bench.pid, signal.SIGINT)  # the main process alone: the children see nothing of it
            # the rest of its rounds would take 150 s; its clean-up takes seconds (a minute at worst when loaded)
            assert bench.wait(120) == 130
            wait_until(lambda: not _session(bench.pid), timeout=10)
            assert bench.stderr is not None
            assert bench.stderr.read().decode().strip().endswith("interrupted")
        finally:
            bench.kill()  # its children are tied to it

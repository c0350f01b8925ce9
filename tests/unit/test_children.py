"""``spawn_tied``: a child dies with this process, not with the thread that asked for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hermes import alive
from tests.support.waiting import wait_until

pytestmark = pytest.mark.unit

_PROCESS = """
import threading, time
from hermes.children import spawn_tied
children = []
asking = threading.Thread(target=lambda: children.append(spawn_tied(["sleep", "600"])))
asking.start()
asking.join()
print(children[0].pid, flush=True)
time.sleep(600)
"""


def test_a_tied_child_outlives_the_thread_that_asked_and_dies_with_the_process() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _PROCESS], stdout=subprocess.PIPE, cwd=Path(__file__).parents[2]
    ) as parent:
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            wait_until(lambda: Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"sleep"), timeout=10)
            parent.kill()
            parent.wait()
            wait_until(lambda: not alive(child), timeout=10)
        finally:
            parent.kill()

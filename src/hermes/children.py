"""Child processes tied to this one: each dies when this process does, even on SIGKILL (PR_SET_PDEATHSIG).

The kernel sends the death signal when the *thread* that forked the child ends, not the process: a child forked
from a pool's thread or a short-lived one would be killed with that thread. So every tied child is forked by one
thread that lives as long as the process (the spawner), whichever thread asks for it."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hermes.tasks import name_os_thread, prctl

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:  # runs in the child between fork and exec
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _Spawner:
    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        self._lock = threading.Lock()
        self._thread: ThreadPoolExecutor | None = None

    def popen(self, argv: Sequence[str | Path], popen: dict[str, Any]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None:
                self._thread = ThreadPoolExecutor(1, "tied-children", name_os_thread)
            thread = self._thread

        def fork() -> subprocess.Popen[bytes]:
            # only the pdeathsig call runs between fork and exec
            return subprocess.Popen(argv, preexec_fn=die_with_parent, **popen)  # noqa: PLW1509

        return thread.submit(fork).result()


_spawner = _Spawner()
os.register_at_fork(after_in_child=_spawner.forget)  # a forked child has none of its parent's threads


def spawn_tied(argv: Sequence[str | Path], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **popen)`` from the spawner thread, the child tied to this process."""
    return _spawner.popen(argv, popen)

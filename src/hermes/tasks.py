"""Background tasks' one way to stop, the bounded wait for a thread that a stop asked to end, and threads whose
names the OS knows too."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# Seconds a stopping thread that is no Kafka consumer group member has to end (its last export or commit, its Kafka
# client's close) before its stop goes on without it; a group member has its session timeout besides
STOP_BOUND = 5.0
_PR_SET_NAME = 15
_OS_NAME_BYTES = 15  # Linux keeps 16 bytes of a thread's name, its NUL included


_prctl: Callable[..., int] | None
try:  # resolved once, not between a fork and an exec (``hermes.children``) nor at each thread's start
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # no Linux C library
    _prctl = None


def prctl(option: int, value: int | bytes) -> None:
    """Linux's prctl(2); nothing where there is no such call."""
    if _prctl is not None:
        _prctl(option, value)


def name_os_thread() -> None:
    """Gives the calling thread its Python name at the OS level too (``/proc/PID/task/TID/comm``, what ``top -H``
    and per-thread CPU figures show), where every thread would otherwise be ``python``. Runs in the thread itself;
    a pool's ``initializer``."""
    prctl(_PR_SET_NAME, threading.current_thread().name.encode()[:_OS_NAME_BYTES])


class NamedThread(threading.Thread):
    """A thread whose name the OS knows too (``name_os_thread``): every thread Hermes starts is one."""

    def run(self) -> None:
        name_os_thread()
        super().run()


async def cancel(task: asyncio.Task[Any] | asyncio.Future[Any] | None) -> None:
    """Cancels ``task`` and waits until it has finished (its clean-up ran); nothing when there is none."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def ended(thread: threading.Thread | None, within: float, what: str) -> bool:
    """Waits on the loop, ``within`` seconds at most, for ``thread`` to end: whether it has (or there is none).
    One still running is left behind with a warning naming ``what`` it is and where it is stuck (its stack). No
    executor thread waits with it: asyncio waits for its executor's threads before the process exits, so one
    blocked in a join for good would keep it from exiting."""
    deadline = time.monotonic() + within
    while thread is not None and thread.is_alive():
        if time.monotonic() >= deadline:
            _left_behind(thread, within, what)
            return False
        await asyncio.sleep(0.02)
    return True


def joined(thread: threading.Thread | None, within: float, what: str) -> bool:
    """``ended`` for a stop that runs no loop: blocks its caller."""
    if thread is None:
        return True
    thread.join(within)
    if thread.is_alive():
        _left_behind(thread, within, what)
        return False
    return True


def _left_behind(thread: threading.Thread, within: float, what: str) -> None:
    frame = sys._current_frames().get(thread.ident or 0)
    stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
    log.warning("%s did not end within %g s; left behind at:\n%s", what, within, stack)

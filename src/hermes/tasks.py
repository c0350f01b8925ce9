"""Background tasks' one way to stop, and the wait for a thread that a stop asked to end."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import traceback
from typing import Any


async def cancel(task: asyncio.Task[Any] | asyncio.Future[Any] | None) -> None:
    """Cancels ``task`` and waits until it has finished (its clean-up ran); nothing when there is none."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def ended(thread: threading.Thread | None, within: float) -> str | None:
    """Waits on the loop, ``within`` seconds at most, for ``thread`` to end: None once it has (or when there is
    none), else where it is stuck (its stack). No executor thread waits with it: asyncio waits for its executor's
    threads before the process exits, so one blocked in a join for good would keep it from exiting."""
    deadline = time.monotonic() + within
    while thread is not None and thread.is_alive():
        if time.monotonic() >= deadline:
            frame = sys._current_frames().get(thread.ident or 0)
            return "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
        await asyncio.sleep(0.02)
    return None

"""One Ctrl-C stops a benchmark at once, with everything it started."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import NoReturn


def stop_at_once() -> None:
    """Makes SIGINT raise KeyboardInterrupt wherever the main thread is, also under ``asyncio.run``: its own handler
    (put in place only over Python's default) merely cancels the main task, which a scenario's blocking work (wrk
    runs, a process's start or stop) does not see until it next awaits, so the rounds went on for minutes after
    the first Ctrl-C and took a second one."""
    signal.signal(signal.SIGINT, _interrupt)


def _interrupt(_signal: int, _frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


def alone(main: Callable[[], object]) -> None:
    """Runs a scenario alone (``python -m hermes.bench.X``): one Ctrl-C stops it, what it started stopped as the
    interrupt unwinds (a second one during that leaves nothing behind either: the children are tied to this
    process), with exit status 130 and no traceback."""
    stop_at_once()
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None

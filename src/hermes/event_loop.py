"""The event loop a process runs on (``--event-loop``): uvloop when installed or asked for, else asyncio's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hermes.errors import HermesError
from hermes.tasks import name_os_thread


def _loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise HermesError(
                "--event-loop uvloop needs the uvloop package (pip install 'hermes-broker[fast]')"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(choice: str, main: Coroutine[Any, Any, None]) -> None:
    """Runs ``main`` to its end on the chosen loop, whose default executor's threads (``asyncio.to_thread``) the OS
    knows by name."""
    with asyncio.Runner(loop_factory=_loop_factory(choice)) as runner:
        executor = ThreadPoolExecutor(thread_name_prefix="asyncio", initializer=name_os_thread)
        runner.get_loop().set_default_executor(executor)
        runner.run(main)

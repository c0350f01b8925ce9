"""The event loop a process runs on (``--event-loop``): uvloop when installed or asked for, else asyncio's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from hermes.errors import HermesError


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
    """Runs ``main`` to its end on the chosen loop."""
    with asyncio.Runner(loop_factory=_loop_factory(choice)) as runner:
        runner.run(main)

"""The byte budget of offloaded bodies: how many bytes of fetched large messages a consumers process holds at once,
across all its subscriptions (``--consumer-offloaded-bytes``). A body is held from its fetch until its message is
finished (delivered, discarded or filtered out), in a temporary file, and in memory too while a filter or a
conversion reads it whole. A fetch waits for room; a body larger than the whole budget goes when nothing else is
held, so it is delayed, never refused."""

from __future__ import annotations

import asyncio
import contextlib


class BodyBudget:
    """Taken on the event loop of the consumers; given back from anywhere."""

    def __init__(self, limit: int = 512 * 1024 * 1024) -> None:
        self.limit = limit
        self.held = 0
        self._freed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def try_take(self, size: int) -> bool:
        """Takes ``size`` bytes if there is room for them now."""
        self._loop = asyncio.get_running_loop()
        if self.held and self.held + size > self.limit:
            return False
        self.held += size
        return True

    async def take(self, size: int) -> None:
        """Takes ``size`` bytes once there is room for them."""
        while not self.try_take(size):
            self._freed.clear()
            await self._freed.wait()

    def give(self, size: int) -> None:
        """Gives back what a body held. A body dropped unclosed is given back by the garbage collector, which may
        run on any thread: the count changes on the loop's."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop or self._loop is None:
            self._given(size)
        else:
            with contextlib.suppress(RuntimeError):  # the loop has stopped: nobody is waiting any more
                self._loop.call_soon_threadsafe(self._given, size)

    def _given(self, size: int) -> None:
        self.held -= size
        self._freed.set()

"""What a pipeline job is, and the loop most jobs share: work in steps on a thread of their own."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from hermes.metadata.repository import MetadataChange
from hermes.tasks import NamedThread

if TYPE_CHECKING:
    from hermes.pipeline.runner import PipelineContext

_JOIN_TIMEOUT = 60.0  # seconds stop() waits for the job's thread (a Spark action may be finishing)


class Job(Protocol):
    name: str

    def start(self) -> None: ...

    def stop(self) -> None: ...


class LoopingJob:
    """Calls ``step()`` on the job's thread until ``stop()``, waiting the seconds each step returns. A job that
    sets ``watches_metadata`` gets ``wakes_on(change)`` for every metadata change: True ends the wait early.
    ``stop()`` calls ``interrupt()`` (cancel what runs now), joins the thread, then ``stopped()``."""

    name: str
    watches_metadata = False

    def __init__(self, context: PipelineContext) -> None:
        self._context = context
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = NamedThread(target=self._loop, name=self.name, daemon=True)
        self._unwatch: Any = None

    def start(self) -> None:
        if self.watches_metadata:
            self._unwatch = self._context.repository.watch(self._on_change)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        self.interrupt()
        if self._thread.is_alive():
            self._thread.join(_JOIN_TIMEOUT)
        self.stopped()

    def step(self) -> float:
        """One round of work; returns the seconds to wait before the next."""
        raise NotImplementedError

    def wakes_on(self, change: MetadataChange) -> bool:
        return False

    def interrupt(self) -> None:
        """Called by stop() before it waits for the thread."""

    def stopped(self) -> None:
        """Called by stop() after the thread ended."""

    def _on_change(self, change: MetadataChange) -> None:
        if self.wakes_on(change):
            self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            delay = self.step()
            if delay > 0:
                self._wake.wait(delay)
            self._wake.clear()

"""The listeners of one repository's change notifications (``MetadataRepository.watch``)."""

from __future__ import annotations

import contextlib
import logging
import threading

from hermes.metadata.repository import Listener, MetadataChange, Unwatch

log = logging.getLogger(__name__)


class Listeners:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()

    def add(self, listener: Listener) -> Unwatch:
        with self._lock:
            self._listeners.append(listener)

        def unwatch() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unwatch

    def tell(self, change: MetadataChange) -> None:
        """Tells every listener; one that fails is logged, and the others are told all the same."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(change)
            except Exception:
                log.exception("metadata listener failed on %s", change)

"""The SQLite store's change log: every write appends a row to ``changes`` in its own transaction (``record``), and
a watcher thread polls the log, so processes that share the file see each other's changes. A write in this process
wakes the watcher at once."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable

from hermes.metadata.listeners import Listeners
from hermes.metadata.repository import ChangeAction, ChangeKind, Listener, MetadataChange, Unwatch
from hermes.tasks import NamedThread

log = logging.getLogger(__name__)

# The change log only needs to reach watchers that poll every fraction of a second.
_CHANGES_KEPT = 10_000


def record(db: sqlite3.Connection, kind: ChangeKind, action: ChangeAction, key: str) -> None:
    """Appends a change inside the transaction of the write it records."""
    db.execute("INSERT INTO changes (kind, action, key) VALUES (?, ?, ?)", (kind.value, action.value, key))


class SqliteChangeLog:
    def __init__(self, connect: Callable[[], sqlite3.Connection], poll_interval: float) -> None:
        self._connect = connect
        self._poll_interval = poll_interval
        self._listeners = Listeners()
        self._lock = threading.Lock()  # the first watch starts the watcher
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None

    def wake(self) -> None:
        """A write in this process: the watcher reads the log now."""
        self._wake.set()

    def watch(self, listener: Listener) -> Unwatch:
        unwatch = self._listeners.add(listener)
        with self._lock:
            if self._watcher is None:
                db = self._connect()
                try:
                    start = db.execute("SELECT COALESCE(MAX(seq), 0) FROM changes").fetchone()[0]
                finally:
                    db.close()
                self._watcher = NamedThread(target=self._poll, args=(start,), name="sqlite-watch", daemon=True)
                self._watcher.start()
        return unwatch

    def _poll(self, seq: int) -> None:
        db: sqlite3.Connection | None = None  # one connection for the watcher's life: it reads every interval
        while not self._closed.is_set():
            self._wake.wait(self._poll_interval)
            self._wake.clear()
            try:
                db = db or self._connect()
                query = "SELECT seq, kind, action, key FROM changes WHERE seq > ? ORDER BY seq"
                rows = db.execute(query, (seq,)).fetchall()
            except sqlite3.Error:
                log.exception("reading the metadata change log failed; retrying")
                if db is not None:
                    db.close()
                db = None
                continue
            for row_seq, kind, action, key in rows:
                seq = row_seq
                self._listeners.tell(MetadataChange(ChangeKind(kind), ChangeAction(action), key))
            if rows and seq // 1000 != rows[0][0] // 1000:  # prune about once per thousand changes
                with contextlib.suppress(sqlite3.Error):
                    db.execute("DELETE FROM changes WHERE seq <= ?", (seq - _CHANGES_KEPT,))
        if db is not None:
            db.close()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._watcher is not None:
            self._watcher.join(timeout=2)

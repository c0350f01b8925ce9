"""The ZooKeeper store's change log under ``changes/``: every write appends a sequential znode in its own
transaction (``append``), and watchers follow the log with a children watch."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import orjson
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError

from hermes.metadata.listeners import Listeners
from hermes.metadata.repository import ChangeAction, ChangeKind, Listener, MetadataChange, Unwatch
from hermes.metadata.zookeeper_session import LOST_CONNECTION

_CHANGES_KEPT = 10_000


def _sequence(child: str) -> int:
    return int(child[1:])


class ZookeeperChangeLog:
    def __init__(self, client: KazooClient, path: str) -> None:
        self._client = client
        self._path = path
        self._listeners = Listeners()
        # re-entrant: kazoo calls the children watch back synchronously while watch() holds the lock
        self._lock = threading.RLock()
        self._last_seen: int | None = None

    def append(self, transaction: Any, kind: ChangeKind, action: ChangeAction, key: str) -> None:
        """Adds the change to the transaction of the write it records."""
        entry = orjson.dumps({"kind": kind.value, "action": action.value, "key": key})
        transaction.create(f"{self._path}/c", entry, sequence=True)

    def watch(self, listener: Listener) -> Unwatch:
        unwatch = self._listeners.add(listener)
        with self._lock:
            if self._last_seen is None:
                try:
                    existing = self._client.get_children(self._path)
                except BaseException:
                    unwatch()  # not watching: the caller may ask again once ZooKeeper answers
                    raise
                self._last_seen = max((_sequence(c) for c in existing), default=-1)
                self._client.ChildrenWatch(self._path, self._on_changes)
                self._client.add_listener(self._on_state)
        return unwatch

    def _on_state(self, state: KazooState) -> None:  # kazoo's connection thread: must not block
        if state == KazooState.CONNECTED:  # the entries a lost connection kept from being read, read now
            self._client.handler.spawn(self._catch_up)

    def _catch_up(self) -> None:
        with contextlib.suppress(*LOST_CONNECTION):
            self._on_changes(self._client.get_children(self._path))

    def _on_changes(self, children: list[str]) -> None:  # kazoo's event thread
        """Tells the listeners of every entry after the last one told, in order. The connection dropping on the
        way leaves the rest for ``_catch_up``: no change goes untold after a ZooKeeper outage or a new session."""
        with self._lock:
            last = self._last_seen if self._last_seen is not None else -1
            for seq, child in sorted((s, c) for c in children if (s := _sequence(c)) > last):
                try:
                    data, _ = self._client.get(f"{self._path}/{child}")
                except NoNodeError:
                    continue  # pruned already
                except LOST_CONNECTION:
                    return
                self._last_seen = seq
                entry = orjson.loads(data)
                change = MetadataChange(ChangeKind(entry["kind"]), ChangeAction(entry["action"]), entry["key"])
                self._listeners.tell(change)
                if seq % 1000 == 0:
                    with contextlib.suppress(*LOST_CONNECTION):
                        self._prune(seq - _CHANGES_KEPT, children)

    def _prune(self, below: int, children: list[str]) -> None:
        for child in children:
            if _sequence(child) < below:
                with contextlib.suppress(NoNodeError):
                    self._client.delete(f"{self._path}/{child}")

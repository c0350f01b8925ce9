"""The frontend's journal: accepted messages the broker has not acknowledged yet, kept on disk.

Only a message about to be answered 202 (the broker did not acknowledge it within the ack timeout) is
written, before the response leaves; a 201 needs no journal. When the broker acknowledges it later an
acknowledgement record follows. After a crash (SIGKILL included: written records are in the page cache) the
next start reads every message without an acknowledgement and sends it again, so a 202 is never lost; a
message acknowledged just before the crash may be sent twice.

Each frontend process (each worker of ``hermes frontend --workers N``) writes a journal file of its own,
``<data-dir>/journal/<pid>-<random>.log``, and holds an ``flock`` on it while it lives. At start a process claims
every journal file nobody holds (its writer stopped or died, with whatever number of workers): it copies the
unacknowledged messages into its own journal, forces that to disk, deletes the old file and sends them again.

Records are ``len (4 bytes) | crc32 (4 bytes) | payload``; a torn last record fails its length or CRC and is
ignored. ``fsync`` decides how often the file is forced to disk: ``always`` (every record), ``interval``
(at most every ``fsync_interval`` seconds) or ``never`` (process crashes are safe, machine crashes are not).
When the unacknowledged bytes would exceed ``max_bytes`` the journal refuses the message (the frontend
answers 503) rather than accept what it cannot keep.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import secrets
import struct
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Literal, NamedTuple

import orjson

from hermes.errors import ServiceUnavailable

log = logging.getLogger(__name__)

FsyncPolicy = Literal["always", "interval", "never"]
_HEADER = struct.Struct(">II")
SUFFIX = ".log"


class JournalEntry(NamedTuple):  # a tuple: one is made for every publish, journaled or not
    message_id: str
    topic: str
    value: bytes
    key: bytes | None
    headers: Sequence[tuple[str, bytes]]
    ack: str

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "op": "put",
                "id": self.message_id,
                "topic": self.topic,
                "ack": self.ack,
                "value": base64.b64encode(self.value).decode(),
                "key": base64.b64encode(self.key).decode() if self.key is not None else None,
                "headers": [[k, base64.b64encode(v).decode()] for k, v in self.headers],
            }
        )

    @classmethod
    def decode(cls, data: dict[str, Any]) -> JournalEntry:
        key = data.get("key")
        headers = data.get("headers") or []
        return cls(
            message_id=str(data["id"]),
            topic=str(data["topic"]),
            value=base64.b64decode(str(data["value"])),
            key=base64.b64decode(key) if isinstance(key, str) else None,
            headers=tuple((str(k), base64.b64decode(v)) for k, v in headers),
            ack=str(data.get("ack", "LEADER")),
        )


def _records(data: bytes, path: Path) -> Iterator[dict[str, Any]]:
    position = 0
    while position + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, position)
        payload = data[position + _HEADER.size : position + _HEADER.size + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            log.warning("journal %s ends in a torn record at byte %d; ignoring the rest", path, position)
            return
        yield orjson.loads(payload)
        position += _HEADER.size + length


class Journal:
    def __init__(
        self, directory: Path, max_bytes: int, fsync: FsyncPolicy = "interval", fsync_interval: float = 0.05
    ) -> None:
        self._directory = directory
        self._max_bytes = max_bytes
        self._fsync = fsync
        self._fsync_interval = fsync_interval
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}  # message id -> its size
        self._pending_bytes = 0
        self._last_sync = 0.0
        self._file: BinaryIO | None = None

    def recover(self) -> list[JournalEntry]:
        """Opens this process's journal; returns the unacknowledged messages of every journal nobody holds (of
        earlier runs, or of workers that died). They are carried into this journal first, so they stay safe
        until this process sees them acknowledged."""
        self._directory.mkdir(parents=True, exist_ok=True)
        own = self._directory / f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
        # kept open (and locked) for the journal's lifetime; 0600: it holds message bodies
        self._file = open(own, "ab", opener=_private)  # noqa: SIM115
        fcntl.flock(self._file, fcntl.LOCK_EX)
        entries: dict[str, JournalEntry] = {}
        claimed = []
        for path in sorted(self._directory.glob(f"*{SUFFIX}")):
            found = _claim(path) if path != own else None
            if found is not None:
                claimed.append((path, found[0]))
                entries.update(found[1])
        for entry in entries.values():
            self._append(entry.encode())
            self._pending[entry.message_id] = len(entry.value)
            self._pending_bytes += len(entry.value)
        self._sync(force=True)
        for path, file in claimed:  # safe in this journal now
            path.unlink()
            file.close()
        if entries:
            log.warning("journal: re-sending %d messages accepted before the last stop", len(entries))
        return list(entries.values())

    @property
    def depth(self) -> int:
        return len(self._pending)

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def put(self, entry: JournalEntry) -> None:
        with self._lock:
            if self._pending_bytes + len(entry.value) > self._max_bytes:
                raise ServiceUnavailable("the frontend's journal of unacknowledged messages is full; try again later")
            self._append(entry.encode())
            self._pending[entry.message_id] = len(entry.value)
            self._pending_bytes += len(entry.value)

    def acknowledge(self, message_id: str) -> None:
        with self._lock:
            size = self._pending.pop(message_id, None)
            if size is None:
                return
            self._pending_bytes -= size
            self._append(orjson.dumps({"op": "ack", "id": message_id}))
            if not self._pending:
                self._rotate()

    def close(self) -> None:
        """Closes the journal, deleting it when nothing in it awaits an acknowledgement."""
        with self._lock:
            if self._file is not None:
                self._sync(force=True)
                if not self._pending:
                    os.unlink(self._file.name)
                self._file.close()
                self._file = None

    def _append(self, payload: bytes, force: bool = False) -> None:
        assert self._file is not None
        self._file.write(_HEADER.pack(len(payload), zlib.crc32(payload)) + payload)
        self._file.flush()  # into the page cache: safe from a crash of this process
        self._sync(force)

    def _sync(self, force: bool = False) -> None:
        assert self._file is not None
        now = time.monotonic()
        if (
            force
            or self._fsync == "always"
            or (self._fsync == "interval" and now - self._last_sync >= self._fsync_interval)
        ):
            if self._fsync != "never" or force:
                os.fsync(self._file.fileno())
            self._last_sync = now

    def _rotate(self) -> None:
        """Nothing is pending: empty the file instead of growing it forever (in place: the lock stays)."""
        assert self._file is not None
        self._file.truncate(0)


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _claim(path: Path) -> tuple[BinaryIO, dict[str, JournalEntry]] | None:
    """The journal at ``path``, locked, and its unacknowledged messages, if nobody holds it (else None). The
    caller keeps it open, so locked, until it has journaled them itself, then deletes it."""
    try:
        file = open(path, "rb")  # noqa: SIM115 - the caller closes it
    except FileNotFoundError:
        return None  # claimed and deleted by another process meanwhile
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path).st_ino != os.fstat(file.fileno()).st_ino:
            raise FileNotFoundError  # deleted (and maybe made anew) between our open and our lock
    except (BlockingIOError, FileNotFoundError):  # held by a live process, or claimed by another one
        file.close()
        return None
    entries: dict[str, JournalEntry] = {}
    for record in _records(file.read(), path):
        if record.get("op") == "put":
            entry = JournalEntry.decode(record)
            entries[entry.message_id] = entry
        else:
            entries.pop(str(record.get("id")), None)
    return file, entries

"""The frontend's journal: accepted messages the broker has not acknowledged yet, kept on disk.

Only a message about to be answered 202 (the broker did not acknowledge it within the ack timeout) is
written, before the response leaves; a 201 needs no journal. When the broker acknowledges it later an
acknowledgement record follows. After a crash (SIGKILL included: written records are in the page cache) the
next start reads every message without an acknowledgement and sends it again, so a 202 is never lost; a
message acknowledged just before the crash may be sent twice.

Records are ``len (4 bytes) | crc32 (4 bytes) | payload``; a torn last record fails its length or CRC and is
ignored. ``fsync`` decides how often the file is forced to disk: ``always`` (every record), ``interval``
(at most every ``fsync_interval`` seconds) or ``never`` (process crashes are safe, machine crashes are not).
When the unacknowledged bytes would exceed ``max_bytes`` the journal refuses the message (the frontend
answers 503) rather than accept what it cannot keep.
"""

from __future__ import annotations

import base64
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson

from hermes.errors import ServiceUnavailable

log = logging.getLogger(__name__)

FsyncPolicy = Literal["always", "interval", "never"]
_HEADER = struct.Struct(">II")
ACTIVE = "journal.log"


@dataclass(frozen=True)
class JournalEntry:
    message_id: str
    topic: str
    value: bytes
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
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


def _records(path: Path) -> Iterator[dict[str, Any]]:
    data = path.read_bytes()
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
        """Opens the journal; returns the messages of earlier runs that were never acknowledged. They are
        carried into the fresh journal, so they stay safe until this run sees them acknowledged."""
        self._directory.mkdir(parents=True, exist_ok=True)
        old = self._directory / ACTIVE
        entries: dict[str, JournalEntry] = {}
        if old.exists():
            for record in _records(old):
                if record.get("op") == "put":
                    entry = JournalEntry.decode(record)
                    entries[entry.message_id] = entry
                else:
                    entries.pop(str(record.get("id")), None)
            recovering = old.with_suffix(".recovering")
            os.replace(old, recovering)
        else:
            recovering = None
        self._file = open(old, "ab")  # noqa: SIM115 - kept open for the journal's lifetime
        for entry in entries.values():
            self._append(entry.encode(), force=True)
            self._pending[entry.message_id] = len(entry.value)
            self._pending_bytes += len(entry.value)
        self._sync(force=True)
        if recovering is not None:
            recovering.unlink()
        if entries:
            log.warning("journal: re-sending %d messages accepted before the last stop", len(entries))
        return list(entries.values())

    @property
    def depth(self) -> int:
        return len(self._pending)

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def put(
        self,
        message_id: str,
        topic: str,
        value: bytes,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes]],
        ack: str,
    ) -> None:
        with self._lock:
            if self._pending_bytes + len(value) > self._max_bytes:
                raise ServiceUnavailable("the frontend's journal of unacknowledged messages is full; try again later")
            self._append(JournalEntry(message_id, topic, value, key, tuple(headers), ack).encode())
            self._pending[message_id] = len(value)
            self._pending_bytes += len(value)

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
        with self._lock:
            if self._file is not None:
                self._sync(force=True)
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
        """Nothing is pending: start an empty file instead of growing this one forever."""
        assert self._file is not None
        self._file.close()
        self._file = open(self._directory / ACTIVE, "wb")  # noqa: SIM115 - kept open for the journal's lifetime

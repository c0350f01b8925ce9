"""A data directory has one owner: the process whose frontend keeps its journal there (``hermes run`` also keeps
the embedded broker's and the pipeline's files there). Consumers and management processes keep nothing of their
own in it, only the SQLite metadata, which several processes share by design: they take no lock, so that they can
run beside a ``hermes run`` or a ``hermes frontend`` on the same machine. The workers of one ``hermes frontend
--workers N`` share their master's lock: the directory stays locked while any of them lives."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from hermes.errors import StartupError

LOCK_FILE = "hermes.lock"
# The data directory holds the metadata (with its encrypted secrets), their key, the users file and the journal of
# accepted messages: its owner's alone.
PRIVATE = 0o700


def make_private(data_dir: Path) -> None:
    """Creates the data directory, or takes from an existing one (made before this rule) what others may do."""
    data_dir.mkdir(mode=PRIVATE, parents=True, exist_ok=True)
    if data_dir.stat().st_mode & 0o077:
        data_dir.chmod(PRIVATE)


class DataDirLock:
    """An exclusive ``flock`` on ``<data-dir>/hermes.lock``, which names its holder; the kernel releases it when
    the process dies, however it dies."""

    def __init__(self, file: IO[str]) -> None:
        self._file = file

    @classmethod
    def take(
        cls, data_dir: Path, holder: str, lock_file: str = LOCK_FILE, what: str = "the data directory"
    ) -> DataDirLock:
        """``what`` names the directory in the refusal (the embedded broker locks its own directory too)."""
        file = open(data_dir / lock_file, "a+")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            file.seek(0)
            other = file.read().strip() or "another process"
            file.close()
            raise StartupError(
                f"{what} {data_dir} is in use by {other}: stop it first, or give this process another --data-dir"
            ) from None
        file.seek(0)
        file.truncate()
        file.write(f"{holder} (pid {os.getpid()})\n")
        file.flush()
        return cls(file)

    def fileno(self) -> int:
        """The lock's file: a process that inherits it shares the lock (the workers of ``hermes frontend``)."""
        return self._file.fileno()

    def release(self) -> None:
        self._file.close()

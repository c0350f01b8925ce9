"""Where Hermes logs: stderr, and for the commands that run a role a file in the data directory, rotated."""

from __future__ import annotations

import logging
import os
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

MAX_BYTES = 10 * 1024 * 1024
BACKUPS = 5  # with the live file, at most 60 MiB of logs
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_path(data_dir: Path, command: str) -> Path:
    """``logs/hermes.log`` for ``hermes run``; a role run alone, whose process may share the data directory with
    a ``hermes run``, has a file of its own (``logs/consumers.log``, ...)."""
    return data_dir / "logs" / ("hermes.log" if command == "run" else f"{command}.log")


def configure_logging(level: str, file: Path | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if file is not None and not _is_stderr(file):
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(RotatingFileHandler(file, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8"))
        except OSError:
            pass  # an unwritable data directory: the start refuses it, in words, on stderr
    logging.basicConfig(level=level, format=FORMAT, handlers=handlers)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def log_file() -> Path | None:
    """The file this process logs to, if any."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            return Path(handler.baseFilename)
    return None


def _is_stderr(file: Path) -> bool:
    """``hermes run`` sends its pipeline child's stderr to that child's log file already: not twice."""
    try:
        return os.path.samestat(os.fstat(sys.stderr.fileno()), file.stat())
    except (OSError, ValueError):
        return False

"""Retention of the offline storage lake: whole hour partitions older than their topic's retention go.

Deleting files the file sink's ``_spark_metadata`` log lists would make every Spark reader of the lake fail,
so removal first drops the partitions' entries from every file of the log (each rewritten whole and renamed
over the old one), then deletes the directories. The log stays a valid log of files that exist, and the sink
appends to it as before. Run it only while the archive query is stopped, so the sink commits nothing
meanwhile.

Plain paths are handled in Python; URIs (``hdfs:``, ``s3a:``, ``file:``, ...) through Hadoop's file system
API on the driver's JVM, so in classic mode any file system Spark writes to can be pruned.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from hermes.pipeline.lake import METADATA_DIR, hour_expired

log = logging.getLogger(__name__)


class LakeFiles(Protocol):
    def children(self, path: str, prefix: str = "") -> list[str]: ...

    def read_text(self, path: str) -> str: ...

    def replace_text(self, path: str, text: str) -> None: ...

    def delete_tree(self, path: str) -> None: ...

    def delete_file(self, path: str) -> None: ...

    def size(self, path: str) -> int: ...

    def rename(self, source: str, target: str) -> None: ...


class LocalFiles:
    def children(self, path: str, prefix: str = "") -> list[str]:
        directory = Path(path)
        return sorted(p.name for p in directory.iterdir() if p.name.startswith(prefix)) if directory.is_dir() else []

    def read_text(self, path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    def replace_text(self, path: str, text: str) -> None:
        target = Path(path)
        replacement = target.with_name(f".{target.name}.retention")
        target.parent.mkdir(parents=True, exist_ok=True)
        replacement.write_text(text, encoding="utf-8")
        # Hadoop's local file system checks a file against its .crc when there is one: drop it first
        target.with_name(f".{target.name}.crc").unlink(missing_ok=True)
        os.replace(replacement, target)

    def delete_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def delete_file(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def size(self, path: str) -> int:
        return Path(path).stat().st_size

    def rename(self, source: str, target: str) -> None:
        os.replace(source, target)


class HadoopFiles:
    """Hadoop's FileSystem API through the classic session's JVM gateway."""

    def __init__(self, spark: Any) -> None:
        self._gateway = spark.sparkContext._gateway
        self._jvm = spark.sparkContext._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _resolve(self, path: str) -> tuple[Any, Any]:
        location = self._jvm.org.apache.hadoop.fs.Path(path)
        return location, location.getFileSystem(self._conf)

    def children(self, path: str, prefix: str = "") -> list[str]:
        location, fs = self._resolve(path)
        if not fs.exists(location):
            return []
        names = (status.getPath().getName() for status in fs.listStatus(location))
        return sorted(name for name in names if name.startswith(prefix))

    def read_text(self, path: str) -> str:
        location, fs = self._resolve(path)
        stream = fs.open(location)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def replace_text(self, path: str, text: str) -> None:
        location, fs = self._resolve(path)
        replacement = self._jvm.org.apache.hadoop.fs.Path(location.getParent(), f".{location.getName()}.retention")
        out = fs.create(replacement, True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        rename = self._jvm.org.apache.hadoop.fs.Options.Rename
        options = self._gateway.new_array(rename, 1)
        options[0] = rename.OVERWRITE
        context = self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(location.toUri(), self._conf)
        context.rename(replacement, location, options)  # atomic where the file system can rename atomically

    def delete_tree(self, path: str) -> None:
        location, fs = self._resolve(path)
        fs.delete(location, True)

    def delete_file(self, path: str) -> None:
        self.delete_tree(path)

    def size(self, path: str) -> int:
        location, fs = self._resolve(path)
        return int(fs.getFileStatus(location).getLen())

    def rename(self, source: str, target: str) -> None:
        location, fs = self._resolve(source)
        if not fs.rename(location, self._jvm.org.apache.hadoop.fs.Path(target)):
            raise OSError(f"could not rename {source} to {target}")


def lake_files(spark: Any, root: str) -> LakeFiles | None:
    """How to reach the lake's files: Python for plain paths, Hadoop for URIs (classic mode only)."""
    if not urlparse(root).scheme:
        return LocalFiles()
    try:
        return HadoopFiles(spark)
    except Exception:  # a Spark Connect session has no SparkContext nor JVM gateway in this process
        log.debug("no JVM gateway for the lake's file system", exc_info=True)
    parsed = urlparse(root)
    return LocalFiles() if parsed.scheme == "file" else None


def join_path(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def partition_of(path: str) -> tuple[str, str] | None:
    """The (topic, hour) directory a file of the lake belongs to."""
    values = dict(p.split("=", 1) for p in unquote(path).split("/") if "=" in p)
    if "topic" in values and "hour" in values:
        return values["topic"], values["hour"]
    return None


def plain_root(root: str, files: LakeFiles) -> str:
    """A ``file:`` root handled by LocalFiles is a plain path to it."""
    parsed = urlparse(root)
    return unquote(parsed.path) if isinstance(files, LocalFiles) and parsed.scheme == "file" else root


def expired_partitions(
    files: LakeFiles, root: str, retention: Mapping[str, timedelta | None], now: datetime
) -> set[tuple[str, str]]:
    """The (topic, hour) partitions whose messages are all older than their topic's retention (None keeps all;
    topics not in ``retention`` are kept)."""
    root = plain_root(root, files)
    expired: set[tuple[str, str]] = set()
    for topic_dir in files.children(root, "topic="):
        topic = topic_dir.split("=", 1)[1]
        keep_for = retention.get(topic)
        if keep_for is None:
            continue
        for hour_dir in files.children(join_path(root, topic_dir), "hour="):
            hour = hour_dir.split("=", 1)[1]
            try:
                if hour_expired(hour, keep_for, now):
                    expired.add((topic, hour))
            except ValueError:
                log.warning("retention: %s/%s is not an hour partition; kept", topic_dir, hour_dir)
    return expired


def remove_partitions(files: LakeFiles, root: str, expired: set[tuple[str, str]]) -> list[str]:
    """Removes partitions from the sink's log, then from storage; returns the directories removed."""
    root = plain_root(root, files)
    log_dir = join_path(root, METADATA_DIR)
    for name in files.children(log_dir):  # first the log, so no new reader is sent to a deleted file
        if name.startswith("."):
            continue
        lines = files.read_text(join_path(log_dir, name)).split("\n")
        kept = [lines[0]] + [
            line for line in lines[1:] if not line.strip() or partition_of(json.loads(line)["path"]) not in expired
        ]
        if len(kept) < len(lines):
            files.replace_text(join_path(log_dir, name), "\n".join(kept))
    removed = []
    for topic, hour in sorted(expired):
        directory = join_path(root, f"topic={topic}", f"hour={hour}")
        files.delete_tree(directory)
        removed.append(directory)
    return removed


def apply_retention(files: LakeFiles, root: str, retention: Mapping[str, timedelta | None], now: datetime) -> list[str]:
    """Removes the expired hour partitions of a lake nothing writes to; returns them."""
    return remove_partitions(files, root, expired_partitions(files, root, retention, now))

"""The pipeline's own files beside Spark's (the archive's kept positions in its checkpoint): plain paths in Python,
URIs (``hdfs:``, ``s3a:``, ``file:``, ...) through Hadoop's file system API on the driver's JVM, so in classic
mode any file system Spark writes to is reachable.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

log = logging.getLogger(__name__)


class Files(Protocol):
    def children(self, path: str, prefix: str = "") -> list[str]: ...

    def read_text(self, path: str) -> str: ...

    def replace_text(self, path: str, text: str) -> None: ...


class LocalFiles:
    def children(self, path: str, prefix: str = "") -> list[str]:
        directory = Path(path)
        return sorted(p.name for p in directory.iterdir() if p.name.startswith(prefix)) if directory.is_dir() else []

    def read_text(self, path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    def replace_text(self, path: str, text: str) -> None:
        target = Path(path)
        replacement = target.with_name(f".{target.name}.new")
        target.parent.mkdir(parents=True, exist_ok=True)
        replacement.write_text(text, encoding="utf-8")
        # Hadoop's local file system checks a file against its .crc when there is one: drop it first
        target.with_name(f".{target.name}.crc").unlink(missing_ok=True)
        os.replace(replacement, target)


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
        replacement = self._jvm.org.apache.hadoop.fs.Path(location.getParent(), f".{location.getName()}.new")
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


def reachable_files(spark: Any, root: str) -> Files | None:
    """How to reach the files under ``root``: Python for plain paths, Hadoop for URIs (classic mode only); None
    when this process cannot (a URI other than ``file:`` under Spark Connect)."""
    if not urlparse(root).scheme:
        return LocalFiles()
    try:
        return HadoopFiles(spark)
    except Exception:  # a Spark Connect session has no SparkContext nor JVM gateway in this process
        log.debug("no JVM gateway for the file system of %s", root, exc_info=True)
    parsed = urlparse(root)
    return LocalFiles() if parsed.scheme == "file" else None


def join_path(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def plain_root(root: str, files: Files) -> str:
    """A ``file:`` root handled by LocalFiles is a plain path to it."""
    parsed = urlparse(root)
    return unquote(parsed.path) if isinstance(files, LocalFiles) and parsed.scheme == "file" else root

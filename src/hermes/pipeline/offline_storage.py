"""Offline storage: topics with ``offlineStorage.enabled`` are archived continuously to the Parquet lake
(layout in :mod:`hermes.pipeline.lake`), and hour partitions older than a topic's retention are removed.

Exactly once: one streaming query reads the archived topics with the hermes-kafka source and writes them with
Spark's file sink, both sharing one checkpoint. The sink commits each batch's files to ``_spark_metadata``
only after writing them, and a batch replayed after a crash finds itself committed or is written again, so
readers of the lake root see every message once.

The archived topics change at run time: the job watches the metadata repository and restarts the query with
the new topic list on the same checkpoint (a new topic is read from its earliest offset).

Retention deletes whole ``hour=`` directories. Deleting files the sink's log lists would make every Spark
reader of the lake fail, so retention runs while the archive query is stopped, first removes the expired
files' entries from every file of the ``_spark_metadata`` log (each file is rewritten whole and renamed into
place), then deletes the directories. The log stays a valid log of the files that exist. Retention works on
local lakes (plain paths and ``file:`` URIs); other file systems are archived but not pruned.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from hermes.domain.message import (
    KAFKA_MESSAGE_ID,
    KAFKA_PROPAGATED_PREFIX,
    KAFKA_PUBLISH_TIMESTAMP,
    KAFKA_SCHEMA_VERSION,
)
from hermes.domain.topic import Topic
from hermes.metadata.repository import ChangeKind, MetadataChange
from hermes.pipeline.kafka_source import SOURCE_NAME
from hermes.pipeline.lake import HOUR_PATTERN_SPARK, METADATA_DIR, PARTITION_COLUMNS, hour_expired

if TYPE_CHECKING:
    from hermes.pipeline.runner import PipelineContext

log = logging.getLogger(__name__)

_RETRY_DELAY = 5.0  # seconds before a failed archive query is started again


def _header(name: str) -> str:
    return f"get(filter(headers, h -> h.key = '{name}'), 0).value"


# The frontend's Kafka headers (hermes.frontend.publishing) as lake columns, in Spark SQL so no row leaves the JVM.
_LAKE_COLUMNS = {
    "message_id": (
        f"coalesce(cast({_header(KAFKA_MESSAGE_ID)} as string), concat_ws('-', topic, `partition`, `offset`))"
    ),
    "publish_timestamp": (
        f"coalesce(timestamp_millis(try_cast(cast({_header(KAFKA_PUBLISH_TIMESTAMP)} as string) as bigint)), timestamp)"
    ),
    "partition": "`partition`",
    "offset": "`offset`",
    "key": "key",
    "schema_version": f"try_cast(cast({_header(KAFKA_SCHEMA_VERSION)} as string) as int)",
    "headers": (
        f"map_from_entries(transform(filter(headers, h -> startswith(h.key, '{KAFKA_PROPAGATED_PREFIX}')), "
        f"h -> struct(substr(h.key, {len(KAFKA_PROPAGATED_PREFIX) + 1}) as key, cast(h.value as string) as value)))"
    ),
    "body": "coalesce(value, X'')",
    "topic": "topic",
}


def archived_topics(topics: list[Topic]) -> dict[str, Topic]:
    return {t.qualified_name: t for t in topics if t.offline_storage.enabled}


def offline_retention(topic: Topic) -> timedelta | None:
    kept = topic.offline_storage.retention_time
    return None if kept.infinite else timedelta(days=kept.duration)


def source_options(context: PipelineContext, topics: list[str]) -> dict[str, str]:
    options = {"bootstrap.servers": context.connection.bootstrap_servers, "topics": ",".join(sorted(topics))}
    options.update({f"kafka.{k}": v for k, v in context.connection.security})
    if context.max_records_per_batch:
        options["maxRecordsPerBatch"] = str(context.max_records_per_batch)
    return options


def start_archive(context: PipelineContext, topics: list[str], trigger: dict[str, Any] | None = None) -> Any:
    """Starts the archive query for ``topics`` on the archive checkpoint (``trigger``: the writer's trigger
    arguments, by default every ``trigger_interval``)."""
    raw = context.spark.readStream.format(SOURCE_NAME).options(**source_options(context, topics)).load()
    lake_rows = raw.selectExpr(*(f"{sql} as `{name}`" for name, sql in _LAKE_COLUMNS.items()))
    lake_rows = lake_rows.selectExpr("*", f"date_format(publish_timestamp, '{HOUR_PATTERN_SPARK}') as hour")
    return (
        lake_rows.writeStream.format("parquet")
        .queryName("hermes-archive")
        .option("path", context.lake.root)
        .option("checkpointLocation", f"{context.checkpoints.rstrip('/')}/archive")
        .partitionBy(*PARTITION_COLUMNS)
        .trigger(**(trigger or {"processingTime": f"{context.trigger_interval} seconds"}))
        .start()
    )


def local_path(root: str) -> Path | None:
    """The local directory of a lake root, or None when it lives on another file system."""
    parsed = urlparse(root)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else root)
    return None


def _partition(path: str) -> tuple[str, str] | None:
    """The (topic, hour) directory a file of the lake belongs to."""
    values = dict(p.split("=", 1) for p in unquote(path).split("/") if "=" in p)
    if "topic" in values and "hour" in values:
        return values["topic"], values["hour"]
    return None


def expired_partitions(
    lake_root: Path, retention: Mapping[str, timedelta | None], now: datetime
) -> set[tuple[str, str]]:
    """The (topic, hour) partitions whose messages are all older than their topic's retention (None keeps all;
    topics not in ``retention`` are kept)."""
    expired: set[tuple[str, str]] = set()
    for topic_dir in sorted(lake_root.glob("topic=*")):
        topic = topic_dir.name.split("=", 1)[1]
        keep_for = retention.get(topic)
        if keep_for is None:
            continue
        for hour_dir in sorted(topic_dir.glob("hour=*")):
            hour = hour_dir.name.split("=", 1)[1]
            try:
                if hour_expired(hour, keep_for, now):
                    expired.add((topic, hour))
            except ValueError:
                log.warning("retention: %s is not an hour partition; kept", hour_dir)
    return expired


def remove_partitions(lake_root: Path, expired: set[tuple[str, str]]) -> list[Path]:
    """Removes partitions from the sink's log, then from the disk. Call it only while nothing writes to the lake."""
    _forget_files(lake_root / METADATA_DIR, expired)  # first the log, so no new reader is sent to a deleted file
    removed = []
    for topic, hour in sorted(expired):
        directory = lake_root / f"topic={topic}" / f"hour={hour}"
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory)
    return removed


def apply_retention(lake_root: Path, retention: Mapping[str, timedelta | None], now: datetime) -> list[Path]:
    """Removes the expired hour partitions of a lake nothing writes to; returns them."""
    return remove_partitions(lake_root, expired_partitions(lake_root, retention, now))


def _forget_files(log_dir: Path, expired: set[tuple[str, str]]) -> None:
    """Drops the entries of expired partitions from each file of the sink's log (a version line, then one
    JSON entry per line), keeping every file a valid log of files that exist."""
    if not log_dir.is_dir():
        return
    for batch_file in sorted(log_dir.iterdir()):
        if batch_file.name.startswith(".") or not batch_file.is_file():
            continue
        lines = batch_file.read_text(encoding="utf-8").split("\n")
        kept = [lines[0]]
        for line in lines[1:]:
            if line.strip() and _partition(json.loads(line)["path"]) in expired:
                continue
            kept.append(line)
        if len(kept) == len(lines):
            continue
        replacement = batch_file.with_name(f".{batch_file.name}.retention")
        replacement.write_text("\n".join(kept), encoding="utf-8")
        # Hadoop's local file system checks a file against its .crc when there is one: drop it first
        batch_file.with_name(f".{batch_file.name}.crc").unlink(missing_ok=True)
        os.replace(replacement, batch_file)


class ArchiveJob:
    """Keeps the archive query running for the current archived topics, and applies retention periodically."""

    name = "archive"

    def __init__(self, context: PipelineContext) -> None:
        self._context = context
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="archive", daemon=True)
        self._query: Any = None
        self._topics: tuple[str, ...] = ()
        self._unwatch: Any = None

    def start(self) -> None:
        self._unwatch = self._context.repository.watch(self._on_change)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._unwatch is not None:
            self._unwatch()
        self._thread.join(60)
        self._stop_query()

    def _on_change(self, change: MetadataChange) -> None:
        if change.kind is ChangeKind.TOPIC:
            self._wake.set()

    def _run(self) -> None:
        next_retention = time.monotonic()
        while not self._stopping.is_set():
            delay = 1.0
            try:
                topics = archived_topics(self._context.repository.list_topics())
                if time.monotonic() >= next_retention:
                    self._retention(topics)
                    next_retention = time.monotonic() + self._context.retention_interval
                self._follow(tuple(sorted(topics)))
            except Exception:
                log.exception("archive: restarting in %.0f s", _RETRY_DELAY)
                self._stop_query()
                delay = _RETRY_DELAY
            self._wake.wait(delay)
            self._wake.clear()

    def _follow(self, topics: tuple[str, ...]) -> None:
        query = self._query
        if query is not None and not query.isActive:
            error = query.exception()
            self._query = None
            raise RuntimeError(f"the archive query stopped: {error}")
        if topics == self._topics and (query is not None or not topics):
            return
        self._stop_query()
        self._topics = topics
        if topics and not self._stopping.is_set():
            self._query = start_archive(self._context, list(topics))
            log.info("archive: archiving %s to %s", ", ".join(topics), self._context.lake.root)

    def _retention(self, topics: dict[str, Topic]) -> None:
        root = local_path(self._context.lake.root)
        if root is None or not root.is_dir():
            return
        retention = {name: offline_retention(topic) for name, topic in topics.items()}
        expired = expired_partitions(root, retention, datetime.now(UTC))
        if not expired:
            return
        self._stop_query()  # the sink must not commit while its log is rewritten; _follow restarts it
        self._topics = ()
        removed = remove_partitions(root, expired)
        log.info("retention: removed %d hour partitions: %s", len(removed), ", ".join(map(str, removed)))

    def _stop_query(self) -> None:
        query, self._query = self._query, None
        if query is not None:
            try:
                query.stop()
            except Exception:
                log.warning("archive: stopping the query failed", exc_info=True)

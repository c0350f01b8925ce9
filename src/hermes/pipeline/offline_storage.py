"""Offline storage: topics with ``offlineStorage.enabled`` are archived continuously to the lake, a Delta table
(layout in :mod:`hermes.pipeline.lake`), and kept in shape by Delta's own retention and compaction.

Exactly once: one streaming query reads the archived topics with Spark's Kafka connector and appends each
micro-batch to the table as one Delta transaction marked with the query and batch id
(:mod:`hermes.pipeline.archive_commits`), so a batch replayed after a crash is found committed and skipped, or is
written for the first time: readers of the table see every message once.

The archived topics change at run time: the job watches the metadata repository and restarts the query with
the new topic list on the same checkpoint (a new topic is read from its earliest offset; a topic switched off
and on again continues where it stopped, see :mod:`hermes.pipeline.archive_positions`).

Every ``retention_interval`` the job deletes what is past each topic's retention and vacuums the table, and
every ``pipeline_optimize_interval`` it compacts the table (:mod:`hermes.pipeline.lake_maintenance`), while
the query goes on appending. A lake of the earlier layout (Parquet from Spark's file sink) is converted to a
Delta table when the job starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from hermes.domain.message import (
    KAFKA_CLOUD_EVENT_PREFIX,
    KAFKA_CONTENT_TYPE,
    KAFKA_MESSAGE_ID,
    KAFKA_PROPAGATED_PREFIX,
    KAFKA_PUBLISH_TIMESTAMP,
    KAFKA_SCHEMA_VERSION,
    PLACEHOLDER_FORMAT,
)
from hermes.domain.topic import Topic
from hermes.metadata.repository import ChangeKind, MetadataChange
from hermes.pipeline.archive_commits import ARCHIVE_QUERY, BatchAppender
from hermes.pipeline.archive_counting import archive_count
from hermes.pipeline.archive_positions import (
    Kept,
    keep_dropped,
    load_kept,
    planned_positions,
    save_kept,
    unarchived,
)
from hermes.pipeline.connector import KAFKA_FORMAT, kafka_options
from hermes.pipeline.files import plain_root, reachable_files
from hermes.pipeline.job import LoopingJob
from hermes.pipeline.lake import HOUR_PATTERN_SPARK, lake_version
from hermes.pipeline.lake_maintenance import convert_parquet_lake, delete_expired, optimize, vacuum
from hermes.pipeline.prometheus import ARCHIVE_RUNNING, ARCHIVED_TOPICS

if TYPE_CHECKING:
    from hermes.pipeline.runner import PipelineContext

log = logging.getLogger(__name__)

_RETRY_DELAY = 5.0  # seconds before a failed archive query is started again
_COMMIT_TIMEOUT = 120.0  # seconds for committing a pending batch before topics are dropped


_HEADER_MAP = "hermes_headers"  # the record's headers by name (of a header given twice, the last: mapKeyDedupPolicy)
_KNOWN_HEADERS = (KAFKA_MESSAGE_ID, KAFKA_PUBLISH_TIMESTAMP, KAFKA_SCHEMA_VERSION)


def _header(name: str) -> str:
    return f"{_HEADER_MAP}['{name}']"


# The frontend's Kafka headers (hermes.frontend.publishing, read by hermes.broker.kafka_consumer.to_message) as lake
# columns, in Spark SQL so no row leaves the JVM. Spark compiles these expressions to Java code, except lambdas
# (filter, transform), which it interprets row by row at about a fifth of the archive's CPU: the named headers
# are looked up in a map instead, and the propagated headers' lambdas run only for a record that has headers
# besides the named ones (a record from the frontend without propagated headers has none).
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
    # The propagated headers by name, and as they are an offloaded message's placeholder marker and a CloudEvent's
    # attributes (retransmission restores them, so the placeholder is resolved again and the event keeps its
    # attributes). The connector gives no array for a record without headers.
    "headers": (
        f"if(coalesce(size(headers), 0) = "
        f"{' + '.join(f'cast(isnotnull({_header(name)}) as int)' for name in _KNOWN_HEADERS)}, "
        "cast(map() as map<string, string>), "
        "map_from_entries(transform(filter(headers, h -> "
        f"startswith(h.key, '{KAFKA_PROPAGATED_PREFIX}') or h.key = '{PLACEHOLDER_FORMAT[0]}' "
        f"or startswith(h.key, '{KAFKA_CLOUD_EVENT_PREFIX}') or h.key = '{KAFKA_CONTENT_TYPE}'), "
        f"h -> struct(if(startswith(h.key, '{KAFKA_PROPAGATED_PREFIX}'), "
        f"substr(h.key, {len(KAFKA_PROPAGATED_PREFIX) + 1}), h.key) as key, cast(h.value as string) as value))))"
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
    """The Kafka connector's options for reading ``topics`` (at most ``max_records_per_batch`` a batch)."""
    return kafka_options(context.connection, topics, context.max_records_per_batch)


def archive_checkpoint(context: PipelineContext) -> str:
    return f"{context.checkpoints.rstrip('/')}/archive"


def lake_rows(context: PipelineContext, topics: list[str], kept: Mapping[str, Kept] | None = None) -> Any:
    """The stream of ``topics``' records as lake rows (partition columns included)."""
    raw = context.spark.readStream.format(KAFKA_FORMAT).options(**source_options(context, topics)).load()
    condition = unarchived(kept or {})
    if condition is not None:
        raw = raw.where(condition)
    raw = raw.selectExpr("*", f"map_from_entries(headers) as {_HEADER_MAP}")
    rows = raw.selectExpr(*(f"{sql} as `{name}`" for name, sql in _LAKE_COLUMNS.items()))
    return rows.selectExpr("*", f"date_format(publish_timestamp, '{HOUR_PATTERN_SPARK}') as hour")


def start_archive(
    context: PipelineContext,
    topics: list[str],
    trigger: dict[str, Any] | None = None,
    kept: Mapping[str, Kept] | None = None,
) -> Any:
    """Starts the archive query for ``topics`` on the archive checkpoint (``trigger``: the writer's trigger
    arguments, by default every ``trigger_interval``; ``kept``: positions below which records are not archived
    again, see :mod:`hermes.pipeline.archive_positions`)."""
    return (
        lake_rows(context, topics, kept)
        .writeStream.queryName(ARCHIVE_QUERY)
        .foreachBatch(BatchAppender(context.lake))
        .option("checkpointLocation", archive_checkpoint(context))
        .trigger(**(trigger or {"processingTime": f"{context.trigger_interval} seconds"}))
        .start()
    )


class ArchiveJob(LoopingJob):
    """Keeps the archive query running for the current archived topics, and maintains the table periodically."""

    name = "archive"
    watches_metadata = True

    def __init__(self, context: PipelineContext) -> None:
        super().__init__(context)
        self._query: Any = None
        self._topics: tuple[str, ...] = ()
        self._next_retention = self._next_optimize = time.monotonic()
        self._count = archive_count(context.lake)  # from here on: what earlier runs committed is not counted

    def start(self) -> None:
        convert_parquet_lake(self._context.spark, self._context.lake)
        super().start()

    def wakes_on(self, change: MetadataChange) -> bool:
        return change.kind is ChangeKind.TOPIC

    def stopped(self) -> None:
        self._stop_query()

    def step(self) -> float:
        try:
            existing = {t.qualified_name: t for t in self._context.repository.list_topics()}
            topics = archived_topics(list(existing.values()))
            self._follow(tuple(sorted(topics)), existing)
            self._maintain(topics)
            self._report()
        except Exception:
            log.exception("archive: restarting in %.0f s", _RETRY_DELAY)
            self._stop_query()
            return _RETRY_DELAY
        return 1.0

    def _follow(self, topics: tuple[str, ...], existing: Mapping[str, Topic]) -> None:
        query = self._query
        if query is not None and not query.isActive:
            error = query.exception()
            self._query = None
            self._count.update(query)
            raise RuntimeError(f"the archive query stopped: {error}")
        if topics == self._topics and (query is not None or not topics):
            return
        self._stop_query()
        self._topics = topics
        if topics and not self._stopping.is_set():
            kept = self._kept_positions(topics, existing)
            self._query = start_archive(self._context, list(topics), kept=kept)
            log.info("archive: archiving %s to %s", ", ".join(topics), self._context.lake.root)

    def _kept_positions(self, topics: tuple[str, ...], existing: Mapping[str, Topic]) -> dict[str, Kept]:
        """The positions to resume from (:mod:`hermes.pipeline.archive_positions`), with those of the topics the
        checkpoint has read and the query is about to drop. Not kept when this process cannot reach the
        checkpoint (Spark Connect with a checkpoint URI)."""
        checkpoint = archive_checkpoint(self._context)
        files = reachable_files(self._context.spark, checkpoint)
        if files is None:
            return {}
        checkpoint = plain_root(checkpoint, files)
        kept = load_kept(files, checkpoint)
        planned, committed = planned_positions(files, checkpoint)
        if not committed and not set(planned) <= set(topics):
            self._commit_pending(sorted(planned), kept)
            planned = planned_positions(files, checkpoint)[0]
        updated = keep_dropped(kept, planned, topics, existing)
        if updated != kept:
            save_kept(files, checkpoint, updated)
        return updated

    def _commit_pending(self, topics: list[str], kept: Mapping[str, Kept]) -> None:
        """Runs the batch the checkpoint planned but did not commit, with the topics and kept positions it was
        planned with: a replay reads a new partition only if the query still subscribes to it, so the batch
        must not be replayed by a query that dropped some of its topics."""
        query = start_archive(self._context, topics, {"once": True}, kept)
        try:
            if not query.awaitTermination(_COMMIT_TIMEOUT):
                raise RuntimeError(f"the archive's pending batch was not committed within {_COMMIT_TIMEOUT:.0f} s")
        finally:
            query.stop()
            self._count.update(query)

    def _report(self) -> None:
        query = self._query
        ARCHIVE_RUNNING.set(1 if query is not None and query.isActive else 0)
        ARCHIVED_TOPICS.set(len(self._topics))
        self._count.update(query)

    def _maintain(self, topics: dict[str, Topic]) -> None:
        """Retention (DELETE, then VACUUM) and compaction (OPTIMIZE) when due, each a transaction of its own
        beside the query's appends. A pass that fails is logged and tried again at the next interval."""
        spark, lake, now = self._context.spark, self._context.lake, time.monotonic()
        interval = self._context.settings.pipeline_optimize_interval
        due = now >= self._next_retention or (interval and now >= self._next_optimize)
        if not due or lake_version(spark, lake) is None:  # nothing archived yet
            return
        if now >= self._next_retention:
            self._next_retention = now + self._context.retention_interval
            retention = {name: offline_retention(topic) for name, topic in topics.items()}
            try:
                deleted = delete_expired(spark, lake, retention, datetime.now(UTC))
                if deleted:
                    log.info("retention: deleted %d messages past their topic's retention", deleted)
                vacuum(spark, lake, timedelta(hours=self._context.settings.pipeline_vacuum_retention_hours))
            except Exception:
                log.exception("archive: retention failed; trying again at the next check")
        if interval and now >= self._next_optimize:
            self._next_optimize = now + interval
            try:
                removed, added = optimize(spark, lake)
                if removed:
                    log.info("lake compaction: %d files rewritten into %d", removed, added)
            except Exception:
                log.exception("archive: lake compaction failed; trying again at the next check")

    def _stop_query(self) -> None:
        query, self._query = self._query, None
        if query is not None:
            try:
                query.stop()
                self._count.update(query)
            except Exception:
                log.warning("archive: stopping the query failed", exc_info=True)
            ARCHIVE_RUNNING.set(0)

"""The archive's commits to the lake: each micro-batch appended exactly once through ``foreachBatch``.

Spark replays a micro-batch only when a query starts: the batch its checkpoint planned but did not record as
done, which the table may or may not have committed before the crash. So only the first batch of a run needs
to know what the table holds. Each append marks its commit with the query and batch (the commit's
``userMetadata``, shown by ``DESCRIBE HISTORY``), and the first batch of a run reads the table's history back to
the newest marked commit: a batch the table already holds is skipped.

Delta's streaming sink (and its ``txnAppId``/``txnVersion`` writes) look that up before every batch instead, and
Delta 4.4 rebuilds the table's whole state for it: three Spark jobs, about 0.3 s a batch, a fifth of the
archive's time on a 100,000-message batch (docs/pipeline.md, fourth pass). Commits of that sink, from earlier
versions of Hermes, carry the query and batch in their operation parameters, and are read the same way.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hermes.pipeline.lake import PARTITION_COLUMNS, Lake, commit_info, missing_table, newest_version

log = logging.getLogger(__name__)

ARCHIVE_QUERY = "hermes-archive"  # the archive query's name: a session runs one query of a name at a time
_STREAMING_SINK_COMMIT = "STREAMING UPDATE"  # the operation of Delta's streaming sink's commits
_HISTORY_PAGE = 50  # commits read at first; each further read reads eight times as many


@dataclass(frozen=True)
class BatchMark:
    query: str  # the streaming query's id (kept in its checkpoint: a new checkpoint is a new query)
    batch: int

    def user_metadata(self) -> str:
        return json.dumps({"writer": ARCHIVE_QUERY, "query": self.query, "batch": self.batch})


def read_mark(user_metadata: str | None) -> BatchMark | None:
    """The archive batch a commit's ``userMetadata`` marks (None for other commits)."""
    try:
        fields = json.loads(user_metadata) if user_metadata else None
        if isinstance(fields, dict) and fields.get("writer") == ARCHIVE_QUERY:
            return BatchMark(str(fields["query"]), int(fields["batch"]))
    except (ValueError, KeyError, TypeError):
        pass
    return None


def _commit_mark(commit: Mapping[str, Any]) -> BatchMark | None:
    """The archive batch of a commit (its commit info), marked by this module or by Delta's streaming sink."""
    mark = read_mark(commit.get("userMetadata"))
    if mark is None and commit.get("operation") == _STREAMING_SINK_COMMIT:
        parameters = commit.get("operationParameters") or {}
        if "queryId" in parameters and "epochId" in parameters:
            mark = BatchMark(str(parameters["queryId"]), int(parameters["epochId"]))
    return mark


def _history(spark: Any, lake: Lake, limit: int) -> Sequence[Mapping[str, Any]] | None:
    """The commit infos of the lake's ``limit`` newest commits, newest first (None when there is no table).
    A local lake's from its log's newest commit files, in milliseconds; Spark's ``DESCRIBE HISTORY`` took
    130-150 ms, at every start of the query."""
    local = lake.local_path()
    if local is not None:
        newest = newest_version(local)
        if newest < 0:
            return None
        infos = (commit_info(local, version) for version in range(newest, max(newest - limit, -1), -1))
        return [info for info in infos if info is not None]  # None: removed by Delta's log retention
    try:
        return [row.asDict() for row in spark.sql(f"DESCRIBE HISTORY {lake.table} LIMIT {limit}").collect()]
    except Exception as exc:  # pyspark's AnalysisException (classic or Connect)
        if not missing_table(exc):
            raise
        return None


def last_committed_batch(spark: Any, lake: Lake, query: str) -> int:
    """The newest batch of ``query`` the lake holds (-1 when none). Only the newest archive commit counts: a
    query's checkpoint is replaced by a new one (a new query id), never run beside it."""
    limit = _HISTORY_PAGE
    while True:
        commits = _history(spark, lake, limit)
        if commits is None:
            return -1
        for commit in commits:  # newest first
            mark = _commit_mark(commit)
            if mark is not None:
                return mark.batch if mark.query == query else -1
        if len(commits) < limit:
            return -1
        limit *= 8


def _query_id(batch: Any) -> str:
    """The id of the streaming query whose micro-batch ``batch`` is."""
    from pyspark.sql.utils import is_remote

    session = batch.sparkSession
    if is_remote():  # Spark Connect runs the function in a worker attached to the query's session
        ids = [q.id for q in session.streams.active if q.name == ARCHIVE_QUERY]
    else:  # the driver: the function runs on the query's thread, which Spark gives the id as a local property
        ids = [session.sparkContext.getLocalProperty("sql.streaming.queryId")]
    if not ids or not ids[0]:
        raise RuntimeError(f"the {ARCHIVE_QUERY} query's id is not known to its micro-batch")
    return str(ids[0])


class BatchAppender:
    """The archive's ``foreachBatch`` function: appends each micro-batch's lake rows to the lake once."""

    def __init__(self, lake: Lake) -> None:
        self._lake = lake
        self._done: BatchMark | None = None  # the batch this function appended (or skipped) last

    def __call__(self, batch: Any, batch_id: int) -> None:
        mark = BatchMark(_query_id(batch), batch_id)
        follows = self._done == BatchMark(mark.query, batch_id - 1)
        if not follows and batch_id <= last_committed_batch(batch.sparkSession, self._lake, mark.query):
            log.info("archive: batch %d is in the lake already (replayed after a restart): skipped", batch_id)
        else:
            self._done = None  # a failed write may have committed: its replay is looked up
            (
                batch.write.format("delta")
                .mode("append")
                .partitionBy(*PARTITION_COLUMNS)
                .option("userMetadata", mark.user_metadata())
                .save(self._lake.root)
            )
        self._done = mark

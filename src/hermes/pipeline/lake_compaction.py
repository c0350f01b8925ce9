"""Small-file compaction of the offline storage lake: each archive micro-batch writes a file per task and hour,
so a closed hour ends up in many small files. The archive job rewrites them into one file per hour, with the
archive query stopped (so the sink commits nothing meanwhile), keeping each message visible exactly once:

1. the files of an hour that ended at least ``CLOSED_AFTER`` ago are taken from the newest ``<n>.compact``
   file of the sink's log (which lists everything committed up to it), when it lists two or more;
2. Spark reads them and writes one file to a staging directory, whose row count must equal the sources';
3. a record of the files replaced and written goes to ``_compaction/``, the new file is moved into the hour's
   directory (not yet listed: invisible), and
4. that one ``.compact`` log file is rewritten with the new file instead of the old ones and renamed over
   itself: a single atomic switch, so readers of the log see either the old files or the new one.

The replaced files stay on disk until the next pass (a reader that listed the log before the switch can still
read them), which deletes every file a record names that the log no longer lists. A pass that died before
the switch leaves files no log lists: the next pass deletes those too, and the hour is compacted again.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlparse

from hermes.pipeline.lake import FILE_COLUMNS_DDL, METADATA_DIR, hour_start
from hermes.pipeline.retention import LakeFiles, LocalFiles, join_path, partition_of, plain_root

log = logging.getLogger(__name__)

CLOSED_AFTER = timedelta(hours=1)  # after its end, an hour rarely gets late messages (they would just add a file)
WORK_DIR = "_compaction"
COMPACTED_PREFIX = "compacted-"  # the files compaction writes
_RECORDS = "records"
_STAGING = "staging"


@dataclass(frozen=True)
class Compacted:
    hours: int = 0
    files: int = 0  # files replaced
    removed: int = 0  # files of earlier passes deleted


def _log_files(files: LakeFiles, log_dir: str) -> tuple[int, dict[int, str]]:
    """The newest compact batch (-1 when none) and every log file by batch number."""
    batches: dict[int, str] = {}
    for name in files.children(log_dir):
        stem = name.removesuffix(".compact")
        if stem.isdigit():
            batches[int(stem)] = name
    newest = max((n for n, name in batches.items() if name.endswith(".compact")), default=-1)
    return newest, batches


def _entries(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.split("\n")[1:] if line.strip()]


def listed_paths(files: LakeFiles, log_dir: str) -> set[str]:
    """The paths (as the log writes them) of the files the sink's log lists now."""
    newest, batches = _log_files(files, log_dir)
    listed: set[str] = set()
    for number in sorted(n for n in batches if n >= newest):
        listed.update(e["path"] for e in _entries(files.read_text(join_path(log_dir, batches[number]))))
    return listed


def _file_path(files: LakeFiles, logged: str) -> str:
    """A path from the log as ``files`` takes it: a plain path for local files, else the URI."""
    return unquote(urlparse(logged).path) if isinstance(files, LocalFiles) else logged


def _clean_up(files: LakeFiles, root: str) -> int:
    """Deletes what earlier passes left: replaced files, files written by a pass that never switched the log,
    and staging directories."""
    files.delete_tree(join_path(root, WORK_DIR, _STAGING))
    records_dir = join_path(root, WORK_DIR, _RECORDS)
    names = [n for n in files.children(records_dir) if n.endswith(".json")]
    if not names:
        return 0
    listed = listed_paths(files, join_path(root, METADATA_DIR))
    removed = 0
    for name in names:
        record = json.loads(files.read_text(join_path(records_dir, name)))
        for path in [*record["replaced"], *record["written"]]:
            if path not in listed:
                files.delete_file(_file_path(files, path))
                removed += 1
        files.delete_file(join_path(records_dir, name))
    return removed


def _closed_hours(entries: list[dict[str, Any]], now: datetime) -> dict[tuple[str, str], list[dict[str, Any]]]:
    by_hour: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        where = partition_of(entry["path"])
        if where is not None and entry.get("action", "add") == "add":
            by_hour[where].append(entry)
    closed = {}
    for (topic, hour), group in by_hour.items():
        try:
            ended = hour_start(hour) + timedelta(hours=1)
        except ValueError:
            continue
        if len(group) >= 2 and ended <= now - CLOSED_AFTER:
            closed[(topic, hour)] = group
    return closed


def _rewrite(spark: Any, files: LakeFiles, spark_root: str, root: str, group: list[dict[str, Any]]) -> list[str]:
    """Writes the group's rows to one staged file; returns its path (checked: as many rows as the sources)."""
    sources = [e["path"] for e in group]
    rows = spark.read.schema(FILE_COLUMNS_DDL).parquet(*sources)
    expected = rows.count()
    name = uuid.uuid4().hex
    rows.coalesce(1).write.parquet(f"{spark_root.rstrip('/')}/{WORK_DIR}/{_STAGING}/{name}")
    staged = join_path(root, WORK_DIR, _STAGING, name)
    written = [join_path(staged, n) for n in files.children(staged) if n.endswith(".parquet")]
    actual = spark.read.schema(FILE_COLUMNS_DDL).parquet(*written).count() if written else 0
    if actual != expected:
        raise RuntimeError(f"lake compaction: wrote {actual} rows for {expected} in {sources[0]} and others")
    return written


def _newest_compact_log(files: LakeFiles, root: str) -> tuple[str, str] | None:
    """The newest ``.compact`` file of the sink's log and its text."""
    log_dir = join_path(root, METADATA_DIR)
    newest, batches = _log_files(files, log_dir)
    if newest < 0:
        return None
    path = join_path(log_dir, batches[newest])
    return path, files.read_text(path)


def compaction_due(files: LakeFiles, lake_root: str, now: datetime) -> bool:
    """Whether a pass has anything to do (checked while the archive query runs)."""
    root = plain_root(lake_root, files)
    if any(n.endswith(".json") for n in files.children(join_path(root, WORK_DIR, _RECORDS))):
        return True
    newest = _newest_compact_log(files, root)
    return newest is not None and bool(_closed_hours(_entries(newest[1]), now))


def compact_lake(spark: Any, files: LakeFiles, lake_root: str, now: datetime) -> Compacted:
    """One compaction pass over the lake. Run it only while the archive query is stopped."""
    root = plain_root(lake_root, files)
    removed = _clean_up(files, root)
    newest = _newest_compact_log(files, root)
    if newest is None:
        return Compacted(removed=removed)
    log_file, text = newest
    entries = _entries(text)
    hours = _closed_hours(entries, now)
    if not hours:
        return Compacted(removed=removed)
    replacements: dict[str, list[dict[str, Any]]] = {}  # replaced path -> new entries (on the group's first)
    moves: list[tuple[str, str]] = []
    for group in hours.values():
        directory = group[0]["path"].rsplit("/", 1)[0]
        new_entries = []
        for staged in _rewrite(spark, files, lake_root, root, group):
            logged = f"{directory}/{COMPACTED_PREFIX}{uuid.uuid4().hex}.parquet"
            moves.append((staged, _file_path(files, logged)))
            new_entries.append({**group[0], "path": logged, "size": files.size(staged)})
            new_entries[-1]["modificationTime"] = int(time.time() * 1000)
        replacements.update({e["path"]: [] for e in group})
        replacements[group[0]["path"]] = new_entries
    record = {"replaced": sorted(replacements), "written": [e["path"] for es in replacements.values() for e in es]}
    files.replace_text(join_path(root, WORK_DIR, _RECORDS, f"{time.time_ns()}.json"), json.dumps(record))
    for staged, target in moves:
        files.rename(staged, target)
    lines = [text.split("\n")[0]]
    for entry in entries:
        for kept in replacements.get(entry["path"], [entry]):
            lines.append(json.dumps(kept, separators=(",", ":")))
    files.replace_text(log_file, "\n".join(lines))  # the switch
    files.delete_tree(join_path(root, WORK_DIR, _STAGING))
    return Compacted(len(hours), len(replacements), removed)

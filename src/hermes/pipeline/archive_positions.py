"""Where the archive left the topics it stopped reading, so that a topic whose offline storage is switched on
again continues where it stopped instead of being archived twice.

Spark's Kafka source keeps positions only of the topics it reads: its checkpoint forgets a topic the query no
longer subscribes to, and reads the topic from its earliest offset when it subscribes to it again. So when the
archive query starts without topics its checkpoint has read, their positions are kept in ``hermes-positions.json``
in the archive checkpoint, with the topic's creation time (a topic deleted and created again under the same name
is another topic and starts from its earliest offset), and the query drops each record of a kept topic below
the kept position (:func:`unarchived`).

Positions are read from the checkpoint's offsets log: the last line of ``offsets/<batch>`` is the Kafka source's
``{"topic": {"partition": next offset}}``. A batch planned but not committed is run again at the next start with
its planned range, so the positions it holds are final only once it is committed: the archive commits such a
batch with the topics it was planned with before it drops any of them (``ArchiveJob``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from hermes.domain.topic import Topic
from hermes.pipeline.files import Files, join_path

POSITIONS_FILE = "hermes-positions.json"

Positions = dict[str, dict[int, int]]  # topic -> partition -> next offset to read


@dataclass(frozen=True)
class Kept:
    created_at: int  # the topic's, so that a topic created again under the same name is not taken for it
    offsets: dict[int, int]


def planned_positions(files: Files, checkpoint: str) -> tuple[Positions, bool]:
    """The positions at the end of the newest planned batch and whether that batch is committed (nothing
    planned yet: no positions, nothing to commit)."""
    batches = [int(name) for name in files.children(join_path(checkpoint, "offsets")) if name.isdigit()]
    if not batches:
        return {}, True
    newest = max(batches)
    line = files.read_text(join_path(checkpoint, "offsets", str(newest))).strip().splitlines()[-1]
    positions = {topic: {int(p): o for p, o in offsets.items()} for topic, offsets in json.loads(line).items()}
    return positions, str(newest) in files.children(join_path(checkpoint, "commits"))


def load_kept(files: Files, checkpoint: str) -> dict[str, Kept]:
    if POSITIONS_FILE not in files.children(checkpoint):
        return {}
    stored = json.loads(files.read_text(join_path(checkpoint, POSITIONS_FILE)))
    return {
        topic: Kept(entry["created_at"], {int(p): o for p, o in entry["offsets"].items()})
        for topic, entry in stored.items()
    }


def save_kept(files: Files, checkpoint: str, kept: Mapping[str, Kept]) -> None:
    document = {topic: {"created_at": k.created_at, "offsets": k.offsets} for topic, k in sorted(kept.items())}
    files.replace_text(join_path(checkpoint, POSITIONS_FILE), json.dumps(document, sort_keys=True))


def keep_dropped(
    kept: Mapping[str, Kept], committed: Positions, listed: Collection[str], topics: Mapping[str, Topic]
) -> dict[str, Kept]:
    """``kept`` with the committed positions of the topics not ``listed`` any more, and without the topics that
    ``topics`` (every topic there is) no longer has or has created again. A kept position never goes back: a
    topic dropped again before reading past it keeps it."""
    result = {t: k for t, k in kept.items() if t in topics and topics[t].created_at == k.created_at}
    for topic, offsets in committed.items():
        if topic in listed or topic not in topics:
            continue
        before = result.get(topic, Kept(topics[topic].created_at, {})).offsets
        merged = {**before, **{p: max(o, before.get(p, o)) for p, o in offsets.items()}}
        result[topic] = Kept(topics[topic].created_at, merged)
    return result


def unarchived(kept: Mapping[str, Kept]) -> Any:
    """A condition on Kafka records: false for the records of kept topics below their kept positions (None when
    nothing is kept)."""
    from pyspark.sql import functions as f

    archived = [
        (f.col("topic") == topic) & (f.col("partition") == partition) & (f.col("offset") < offset)
        for topic, k in sorted(kept.items())
        for partition, offset in sorted(k.offsets.items())
    ]
    if not archived:
        return None
    condition = archived[0]
    for other in archived[1:]:
        condition = condition | other
    return ~condition

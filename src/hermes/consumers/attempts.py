"""The attempts of a partition's unfinished messages, kept with its committed offset, so that a message's
``Hermes-Retry-Count`` counts on after a restart or on another node.

A Kafka offset commit carries a metadata string (``offset.metadata.max.bytes``, 4 KiB by default). The committed
offset is the partition's first unfinished message; the note lists the failed attempts of unfinished messages at
or after it, ``;attempts=<offset>:<count>,...``, at most ``MAX_NOTED`` of them (the lowest offsets first). A
message that never failed costs nothing: only a failed attempt is noted, and a partition's note is committed again
when it changed.
"""

from __future__ import annotations

from hermes.broker.admin import ATTEMPTS_NOTE

MAX_NOTED = 64


def note(attempts: dict[int, int], committed: int) -> str:
    """The note of a partition whose committed offset is ``committed``: '' when no unfinished message failed."""
    noted = sorted((offset, count) for offset, count in attempts.items() if offset >= committed)[:MAX_NOTED]
    return ATTEMPTS_NOTE + ",".join(f"{offset}:{count}" for offset, count in noted) if noted else ""


def read(metadata: str) -> dict[int, int]:
    """The attempts a committed offset's metadata noted (none from a note this cannot read)."""
    _, found, listed = metadata.partition(ATTEMPTS_NOTE)
    attempts = {}
    for entry in listed.split(",") if found else ():
        offset, _, count = entry.partition(":")
        if offset.isdigit() and count.isdigit():
            attempts[int(offset)] = int(count)
    return attempts

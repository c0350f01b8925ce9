"""The frontend's journal: what survives a crash, the size limit, and journals of several processes."""

from pathlib import Path

import pytest

from hermes.errors import ServiceUnavailable
from hermes.frontend.journal import Journal, JournalEntry

pytestmark = pytest.mark.unit


def _entry(message_id: str, value: bytes, ack: str = "LEADER", **fields: object) -> JournalEntry:
    values: dict[str, object] = {"topic": "g.t", "key": None, "headers": (), **fields}
    return JournalEntry(message_id, str(values["topic"]), value, values["key"], values["headers"], ack)  # type: ignore[arg-type]


def test_unacknowledged_messages_survive_and_a_torn_record_is_ignored(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=10_000, fsync="always")
    assert journal.recover() == []
    journal.put(_entry("a", b'{"a": 1}', key=b"key", headers=[("h-Trace-Id", b"x")]))
    journal.put(_entry("b", b'{"b": 2}', "ALL"))
    journal.acknowledge("a")
    [path] = tmp_path.glob("*.log")
    with open(path, "ab") as torn:  # a crash in the middle of writing the next record
        torn.write(b"\x00\x00\x01\x00garbage")
    journal.close()
    reopened = Journal(tmp_path, max_bytes=10_000)
    [entry] = reopened.recover()
    assert (entry.message_id, entry.value, entry.key, tuple(entry.headers), entry.ack) == (
        "b",
        b'{"b": 2}',
        None,
        (),
        "ALL",
    )
    assert not path.exists()  # carried into the new journal, which keeps it until acknowledged
    reopened.close()
    again = Journal(tmp_path, max_bytes=10_000)
    assert [e.message_id for e in again.recover()] == ["b"]
    again.close()


def test_a_journal_with_nothing_pending_is_deleted_at_close(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=10_000)
    journal.recover()
    journal.put(_entry("a", b"{}"))
    journal.acknowledge("a")
    journal.close()
    assert list(tmp_path.iterdir()) == []


def test_a_full_journal_refuses_rather_than_accepting_what_it_cannot_keep(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=10)
    journal.recover()
    journal.put(_entry("a", b"12345678"))
    with pytest.raises(ServiceUnavailable):
        journal.put(_entry("b", b"12345"))
    journal.acknowledge("a")
    journal.put(_entry("b", b"12345"))
    assert journal.depth == 1
    journal.close()


def test_a_journal_claims_the_journals_nobody_holds_and_leaves_live_ones_alone(tmp_path: Path) -> None:
    """Two workers ran; one died (its journal is unlocked), one lives: a new worker takes over only the first."""
    live = Journal(tmp_path, max_bytes=10_000)
    live.recover()
    live.put(_entry("live", b"{}"))
    dead = Journal(tmp_path, max_bytes=10_000)
    dead.recover()
    dead.put(_entry("orphan", b"{}"))
    assert dead._file is not None
    dead._file.close()  # as a crash would: the lock goes, the file stays
    (tmp_path / "journal.log").write_bytes(b"")  # an empty journal of the single-process layout
    new = Journal(tmp_path, max_bytes=10_000)
    assert [e.message_id for e in new.recover()] == ["orphan"]
    assert len(list(tmp_path.glob("*.log"))) == 2  # the live one and the new one
    third = Journal(tmp_path, max_bytes=10_000)
    assert third.recover() == []  # both held
    for journal in (live, new, third):
        journal.close()

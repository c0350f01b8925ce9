from pathlib import Path

import pytest

from hermes.errors import ServiceUnavailable
from hermes.frontend.journal import ACTIVE, Journal

pytestmark = pytest.mark.unit


def test_unacknowledged_messages_survive_and_a_torn_record_is_ignored(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=10_000, fsync="always")
    assert journal.recover() == []
    journal.put("a", "g.t", b'{"a": 1}', b"key", [("h-Trace-Id", b"x")], "LEADER")
    journal.put("b", "g.t", b'{"b": 2}', None, [], "ALL")
    journal.acknowledge("a")
    journal.close()
    with open(tmp_path / ACTIVE, "ab") as torn:  # a crash in the middle of writing the next record
        torn.write(b"\x00\x00\x01\x00garbage")
    reopened = Journal(tmp_path, max_bytes=10_000)
    [entry] = reopened.recover()
    reopened.close()
    assert (entry.message_id, entry.value, entry.key, entry.headers, entry.ack) == ("b", b'{"b": 2}', None, (), "ALL")


def test_a_full_journal_refuses_rather_than_accepting_what_it_cannot_keep(tmp_path: Path) -> None:
    journal = Journal(tmp_path, max_bytes=10)
    journal.recover()
    journal.put("a", "g.t", b"12345678", None, [], "LEADER")
    with pytest.raises(ServiceUnavailable):
        journal.put("b", "g.t", b"12345", None, [], "LEADER")
    journal.acknowledge("a")
    journal.put("b", "g.t", b"12345", None, [], "LEADER")
    assert journal.depth == 1
    journal.close()

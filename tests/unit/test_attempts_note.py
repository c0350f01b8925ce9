"""The attempts of unfinished messages, as noted in a committed offset's metadata."""

import pytest

from hermes.broker.admin import SHARED_READER
from hermes.consumers import attempts, retransmission

pytestmark = pytest.mark.unit


def test_only_unfinished_messages_from_the_committed_offset_on_are_noted_lowest_first_and_capped() -> None:
    failed = {5: 1, 9: 2, 12: 7, **{100 + n: 1 for n in range(100)}}
    note = attempts.note(failed, 9)
    found = attempts.read(SHARED_READER + "node-1" + note)
    assert 5 not in found and found[9] == 2 and found[12] == 7
    assert len(found) == attempts.MAX_NOTED and max(found) == 100 + attempts.MAX_NOTED - 3
    assert len(note) < 4096  # Kafka's offset.metadata.max.bytes
    assert attempts.note({5: 1}, 9) == ""


@pytest.mark.parametrize("metadata", ["", "hermes-shared-reader:n", "x;attempts=", "x;attempts=a:1,2:b,:"])
def test_a_missing_or_unreadable_note_notes_nothing(metadata: str) -> None:
    assert attempts.read(metadata) == {}


def test_the_retransmission_applied_is_noted_before_the_attempts_and_both_are_read_back() -> None:
    metadata = SHARED_READER + "node-1" + retransmission.note(1700000000123) + attempts.note({9: 2}, 9)
    assert retransmission.noted(metadata) == 1700000000123
    assert attempts.read(metadata) == {9: 2}
    assert retransmission.noted(SHARED_READER + "node-1" + attempts.note({9: 2}, 9)) is None  # an earlier version's
    assert retransmission.noted("x;retransmission=;attempts=9:2") is None

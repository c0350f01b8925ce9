import pytest

from hermes.consumers.offsets import OffsetTracker

pytestmark = pytest.mark.unit
P = ("g.t", 0)


def test_commits_stop_below_the_lowest_message_in_flight() -> None:
    tracker = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.read(P, offset)
    tracker.finish(P, 11)
    tracker.finish(P, 12)
    assert tracker.committable() == {P: 10}
    tracker.finish(P, 10)
    assert tracker.committable() == {P: 13}


def test_only_advanced_offsets_are_committable_again() -> None:
    tracker = OffsetTracker()
    tracker.read(P, 0)
    tracker.finish(P, 0)
    tracker.mark_committed(tracker.committable())
    assert tracker.committable() == {}
    tracker.read(P, 1)
    assert tracker.committable() == {}  # still 1: nothing new is safe yet
    tracker.finish(P, 1)
    assert tracker.committable() == {P: 2}


def test_started_deliveries_are_counted_per_partition_until_finished_or_forgotten() -> None:
    tracker, other = OffsetTracker(), ("g.t", 1)
    for offset in (0, 1, 2):
        tracker.read(P, offset)
    tracker.read(other, 0)
    tracker.start(P, 0)
    tracker.start(P, 1)
    tracker.start(other, 0)
    assert tracker.started([P]) == 2 and tracker.is_started(P, 1) and not tracker.is_started(P, 2)
    tracker.finish(P, 0)
    assert tracker.started([P]) == 1
    assert tracker.committable() == {P: 1, other: 0}  # 2 was read but not started: still unfinished
    tracker.forget([P])
    assert tracker.started([P, other]) == 1

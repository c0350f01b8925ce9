import pytest

from hermes.consumers.offsets import OffsetTracker

pytestmark = pytest.mark.unit
P = ("g.t", 0)


def test_commits_stop_below_the_lowest_message_in_flight() -> None:
    tracker = OffsetTracker()
    tracker.read(P, [10, 11, 12])
    tracker.finish(P, [11, 12])
    assert tracker.committable() == {P: 10}
    tracker.finish(P, [10])
    assert tracker.committable() == {P: 13}


def test_only_advanced_offsets_are_committable_again() -> None:
    tracker = OffsetTracker()
    tracker.read(P, [0])
    tracker.finish(P, [0])
    tracker.mark_committed(tracker.committable())
    assert tracker.committable() == {}
    tracker.read(P, [1])
    assert tracker.committable() == {}  # still 1: nothing new is safe yet
    tracker.finish(P, [1])
    assert tracker.committable() == {P: 2}


def test_started_deliveries_are_counted_per_partition_until_finished_or_forgotten() -> None:
    tracker, other = OffsetTracker(), ("g.t", 1)
    tracker.read(P, [0, 1, 2])
    tracker.read(other, [0])
    assert tracker.take(P, [0, 1], revoking=False) == [True, True]
    assert tracker.take(other, [0], revoking=False) == [True]
    assert tracker.started([P]) == 2
    tracker.finish(P, [0])
    assert tracker.started([P]) == 1
    assert tracker.committable() == {P: 1, other: 0}  # 2 was read but not started: still unfinished
    tracker.forget([P])
    assert tracker.started([P, other]) == 1


def test_a_revoked_partition_starts_nothing_new_but_takes_again_what_it_started() -> None:
    tracker = OffsetTracker()
    tracker.read(P, [0, 1, 2])
    tracker.take(P, [0], revoking=False)
    tracker.finish(P, [2])
    # 0 was started (put back when its batch was full), 1 was not, 2 is finished already
    assert tracker.take(P, [0, 1, 2], revoking=True) == [True, False, False]
    assert tracker.started([P]) == 1
    assert tracker.all_pending(P, [0, 1]) and not tracker.all_pending(P, [1, 2])


def test_one_offset_is_taken_and_finished_as_a_list_of_one_is() -> None:
    tracker = OffsetTracker()
    tracker.read(P, [0, 1, 2, 3])
    tracker.take(P, [0], revoking=False)
    tracker.finish(P, [3])
    taken = [tracker.take_one(P, offset, revoking=True) for offset in (0, 1, 3)]
    taken.append(tracker.take_one(P, 1, revoking=False))
    assert taken == [True, False, False, True]
    assert tracker.started([P]) == 2
    tracker.finish_one(P, 0)
    assert tracker.started([P]) == 1 and tracker.committable() == {P: 1}

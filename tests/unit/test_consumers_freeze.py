"""The consumers process freezes its long-lived objects again once its consumers came or went (supervisor._freeze):
what stopped consumers left in cycles, frozen before, must still be collected; after consumers only started, the
frozen are not walked again."""

import gc
import weakref

import pytest

from hermes.consumers.supervisor import _freeze


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle, as a consumer and its receiver's callbacks make
    return weakref.ref(first)


@pytest.mark.unit
def test_a_frozen_cycle_let_go_is_collected_and_the_living_are_frozen() -> None:
    gone = _cycle()
    gc.freeze()  # frozen as the process does at start, or after the last change
    kept = [_Node()]
    try:
        _freeze(thaw=True)
        assert gone() is None
        assert not any(o is kept for o in gc.get_objects())  # frozen: out of the collector's generations
    finally:
        gc.unfreeze()


@pytest.mark.unit
def test_without_thawing_the_frozen_stay_frozen_and_the_new_are_collected_or_frozen() -> None:
    frozen_garbage = _cycle()
    gc.freeze()
    new_garbage = _cycle()
    kept = [_Node()]
    try:
        _freeze(thaw=False)
        assert new_garbage() is None
        assert frozen_garbage() is not None  # left for the next freeze that thaws
        assert not any(o is kept for o in gc.get_objects())
    finally:
        gc.unfreeze()
        gc.collect()

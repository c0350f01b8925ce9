"""The consumers process freezes its long-lived objects again once its consumers came or went (supervisor._freeze):
what stopped consumers left in cycles, frozen before, must still be collected."""

import gc
import weakref

import pytest

from hermes.consumers.supervisor import _freeze


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.mark.unit
def test_a_frozen_cycle_let_go_is_collected_and_the_living_are_frozen() -> None:
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle, as a consumer and its receiver's callbacks make
    gone = weakref.ref(first)
    gc.freeze()  # frozen as the process does at start, or after the last change
    del first, second
    kept = [_Node()]
    try:
        _freeze()
        assert gone() is None
        assert not any(o is kept for o in gc.get_objects())  # frozen: out of the collector's generations
    finally:
        gc.unfreeze()

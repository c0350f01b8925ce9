"""The consumers process freezes its long-lived objects again once its consumers came or went (supervisor._freeze):
what stopped consumers left in cycles, frozen before, must still be collected."""

import asyncio
import gc
import weakref
from pathlib import Path

import pytest

from hermes.consumers.supervisor import _freeze
from hermes.runtime import Hermes
from tests.support.hermes import hermes_settings


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


@pytest.mark.unit
def test_a_stopped_hermes_gives_what_was_frozen_back_to_the_collector(tmp_path: Path) -> None:
    """In a process that outlives its Hermes (the tests', an embedding application), the stopped roles' cycles, and
    the Kafka clients' threads and pipes they hold, must be collected: frozen, they never were."""
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    gc.freeze()  # as the consumers froze them while running
    del first, second
    try:
        asyncio.run(Hermes(hermes_settings(tmp_path, None), frozenset()).stop())
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()

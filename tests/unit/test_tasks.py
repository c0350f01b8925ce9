import asyncio
import threading

import pytest

from hermes.tasks import ended

pytestmark = pytest.mark.unit


def test_a_thread_is_waited_for_a_bounded_time_and_one_still_running_then_says_where_it_is() -> None:
    release = threading.Event()

    def stuck_in_close() -> None:
        release.wait(30)

    thread = threading.Thread(target=stuck_in_close, daemon=True)
    thread.start()
    try:
        stack = asyncio.run(ended(thread, 0.2))
        assert stack is not None and "stuck_in_close" in stack
    finally:
        release.set()
    assert asyncio.run(ended(thread, 10)) is None
    assert asyncio.run(ended(None, 0)) is None

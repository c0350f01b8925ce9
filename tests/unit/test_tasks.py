import asyncio
import logging
import threading

import pytest

from hermes.tasks import ended, joined

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("wait", ["on the loop", "blocking"])
def test_a_thread_is_waited_for_a_bounded_time_and_one_still_running_is_left_with_where_it_is(
    wait: str, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()

    def stuck_in_close() -> None:
        release.wait(30)

    def waited(thread: threading.Thread | None, within: float) -> bool:
        if wait == "on the loop":
            return asyncio.run(ended(thread, within, "the stuck thread"))
        return joined(thread, within, "the stuck thread")

    thread = threading.Thread(target=stuck_in_close, daemon=True)
    thread.start()
    try:
        with caplog.at_level(logging.WARNING, logger="hermes.tasks"):
            assert not waited(thread, 0.2)
        [warning] = caplog.messages
        assert warning.startswith("the stuck thread did not end within 0.2 s") and "stuck_in_close" in warning
    finally:
        release.set()
    assert waited(thread, 10)
    assert waited(None, 0)

"""Waiting for a condition in tests, without fixed sleeps."""

from __future__ import annotations

import time


def wait_until(condition: object, timeout: float = 10.0, interval: float = 0.05) -> None:
    """Polls ``condition()`` until it is truthy; fails the test when the time is up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")

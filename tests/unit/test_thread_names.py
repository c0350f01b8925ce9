"""The threads Hermes starts have their names at the OS level too (``/proc/self/task/*/comm``), so that per-thread
CPU figures say which thread is which instead of ``python`` for all."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hermes import event_loop
from hermes.tasks import NamedThread, name_os_thread
from tests.support.hermes import thread_names

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[2] / "src" / "hermes"


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_a_named_thread_and_a_pools_threads_carry_their_names_to_the_os(release: threading.Event) -> None:
    started = threading.Barrier(3)

    def wait() -> None:
        started.wait(10)
        release.wait(10)

    threads = [NamedThread(target=wait, name="shared-reader", daemon=True)]
    threads.append(NamedThread(target=wait, name="consumer-group.orders$printer", daemon=True))
    for thread in threads:
        thread.start()
    started.wait(10)
    names = thread_names()
    assert "shared-reader" in names
    assert "consumer-group." in names  # the first 15 bytes: Linux's limit
    with ThreadPoolExecutor(1, thread_name_prefix="password-check", initializer=name_os_thread) as pool:
        assert "password-check_" in pool.submit(thread_names).result()
    release.set()
    for thread in threads:
        thread.join(10)


def test_the_event_loops_default_executor_names_its_threads() -> None:
    seen: list[list[str]] = []

    async def main() -> None:
        seen.append(await asyncio.to_thread(thread_names))

    event_loop.run("asyncio", main())
    assert "asyncio_0" in seen[0]


def test_every_thread_of_the_broker_is_a_named_one() -> None:
    """The benchmark, the operator's commands and the client are no part of the broker's processes."""
    plain = [
        f"{path.relative_to(SRC)}:{number}"
        for path in SRC.rglob("*.py")
        if path.relative_to(SRC).parts[0] not in ("bench", "admin_cli", "client")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "threading.Thread(" in line or ("ThreadPoolExecutor(" in line and "name_os_thread" not in line)
    ]
    assert plain == []

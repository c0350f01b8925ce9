"""The benchmark's recording subscriber (``hermes.bench.load.Sink``), a process of its own: real HTTP requests from
the consumers' client, arrivals stamped there and streamed back, delays, and an end with its input."""

from __future__ import annotations

import asyncio
import time

import pytest

from hermes.bench.load import Sink
from hermes.http.client import HttpClient

pytestmark = pytest.mark.integration


async def _exercise() -> None:
    sink = Sink()
    await sink.start()
    client = HttpClient()
    try:
        before = time.monotonic()
        for i in range(3):
            response = await client.post(sink.url("a"), b"{}", {"Hermes-Message-Id": f"m{i}"}, 5)
            assert response.status == 200
        after = time.monotonic()
        assert await sink.wait_for("a", 3, 5)
        assert [m for m, _ in sink.arrivals["a"]] == ["m0", "m1", "m2"]
        assert all(before <= at <= after for _, at in sink.arrivals["a"])  # one clock across the processes
        assert not await sink.wait_for("b", 1, 0.1)

        await sink.set_delay("b", 0.3)
        began = time.monotonic()
        assert (await client.post(sink.url("b"), b"{}", {}, 5)).status == 200
        assert time.monotonic() - began >= 0.3
        await sink.set_delay("b", 0.0)
        began = time.monotonic()
        await client.post(sink.url("b"), b"{}", {}, 5)
        assert time.monotonic() - began < 0.25
        assert (await client.post(f"http://127.0.0.1:{sink.port}/other", b"{}", {}, 5)).status == 404
    finally:
        await client.close()
        await sink.stop()
    assert sink._process is not None and sink._process.returncode == 0


def test_records_every_arrival_in_its_own_process() -> None:
    asyncio.run(_exercise())

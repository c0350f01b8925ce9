"""Scenario 5, the offloaded part: one message far over its topic's maxMessageSize (100 MB by default), stored
beside Kafka and fetched back by the consumers for a SERIAL and a BATCH subscription at once; publish and delivery
time beside a raw POST of the same body, and the peak resident memory of the frontend and consumers processes while
it passed, against 1.5x the message; then a Kafka client's upload of the same body to the offload service, and the
frontend's peak memory while it is checked and stored.

Run alone: ``python -m hermes.bench.offloaded [bytes]`` (starts its own broker and role processes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import bson

from hermes.bench.interrupt import alone
from hermes.bench.load import JSON_HEADERS, Sink, json_body
from hermes.bench.system import Management, System, memory_kib, run_alone, warm_up

SIZE = 100_000_000
_ROLES = ("frontend", "consumers")


async def offloaded_message(system: System, sink: Sink, api: Management, size: int = SIZE) -> dict[str, Any]:
    topic = await api.topic("benchl", "offloaded")  # maxMessageSize at its default: the body is offloaded
    await api.subscription(topic, "offloaded", sink.url("offloaded"))
    # batchVolume below the message: it goes in a batch of its own, streamed between the array's brackets
    batch = {"batchSize": 10, "batchTime": 100, "batchVolume": 1024 * 1024, "requestTimeout": 60_000}
    await api.batch_subscription(topic, "offloaded-batch", sink.url("offloaded-batch"), **batch)
    if not await warm_up(system.frontend, topic, sink, ["offloaded", "offloaded-batch"]):
        return {"error": "the subscription never started receiving", "void": True}
    body = json_body(size)
    pids = {role: system.processes[role].pid for role in _ROLES}
    before = {role: memory_kib(pid) for role, pid in pids.items()}
    _reset_peaks(pids.values())
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        started = time.monotonic()
        async with session.post(f"{system.frontend}/topics/{topic}", data=body, headers=JSON_HEADERS) as r:
            await r.read()
            status = r.status
        published = time.monotonic() - started
        delivered = await sink.wait_for("offloaded", 1, 600)
        delivery = sink.arrivals["offloaded"][-1][1] - started if delivered else None
        batched = await sink.wait_for("offloaded-batch", 1, 600)
        batch_delivery = sink.arrivals["offloaded-batch"][-1][1] - started if batched else None
        after = {role: memory_kib(pid) for role, pid in pids.items()}
        started = time.monotonic()
        async with session.post(sink.url("raw"), data=body, headers=JSON_HEADERS) as r:
            await r.read()
        raw = time.monotonic() - started
        upload = await _upload(session, system, topic, body)
    sink.arrivals.pop("raw", None)
    await api.remove_subscription(topic, "offloaded")
    await api.remove_subscription(topic, "offloaded-batch")
    bound_kib = int(size * 1.5 / 1024)
    return {
        "bytes": size,
        "status": status,
        "publish_s": round(published, 2),
        "delivery_s": None if delivery is None else round(delivery, 2),
        "batch_delivery_s": None if batch_delivery is None else round(batch_delivery, 2),
        "raw_post_s": round(raw, 2),
        "void": not (delivered and batched) or upload["status"] != 201,
        "upload": upload,
        "memory_kib": {
            role: {
                "rss_before": before[role].get("VmRSS", 0),
                "peak": after[role].get("VmHWM", 0),
                "peak_over_before": after[role].get("VmHWM", 0) - before[role].get("VmRSS", 0),
                "bound_1_5x": bound_kib,
            }
            for role in _ROLES
        },
    }


async def _upload(session: aiohttp.ClientSession, system: System, topic: str, body: bytes) -> dict[str, Any]:
    """A Kafka client's upload of the same body to the offload service (a BSON document): its time and the
    frontend's peak memory while it is checked and stored."""
    document = bson.encode({"message": body, "headers": [["origin", b"bench"]]})
    pid = system.processes["frontend"].pid
    before = memory_kib(pid)
    _reset_peaks([pid])
    started = time.monotonic()
    async with session.post(f"{system.frontend}/offload/topic/{topic}+oversized", data=document) as r:
        await r.read()
        status = r.status
    took = time.monotonic() - started
    peak = memory_kib(pid).get("VmHWM", 0)
    return {
        "status": status,
        "upload_s": round(took, 2),
        "frontend_rss_before": before.get("VmRSS", 0),
        "frontend_peak": peak,
        "frontend_peak_over_before": peak - before.get("VmRSS", 0),
    }


def _reset_peaks(pids: Iterable[int]) -> None:
    """The peaks (VmHWM) start again from the resident memory of now (Linux's clear_refs)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/clear_refs").write_text("5")


async def _alone(size: int) -> dict[str, Any]:
    return await run_alone(lambda system, sink, api: offloaded_message(system, sink, api, size))


if __name__ == "__main__":
    alone(lambda: print(json.dumps(asyncio.run(_alone(int(sys.argv[1]) if len(sys.argv) > 1 else SIZE)), indent=2)))

"""The default install's memory: ``hermes run`` with its pipeline (the embedded broker, the Spark pipeline's
process and driver JVM) on a fresh data directory, one topic archived to the lake and one tracked, a few
hundred messages published to each, then left idle. Every ``every`` seconds for ``seconds``, the resident memory of
each process of the tree: RSS, and PSS (shared pages counted once across the tree, so the PSS sum is the tree's
honest total). Reports the last third's medians (the JVMs grow for minutes after start) and whether the archive
wrote the lake meanwhile. Target (issue 31): the tree under 1 GiB.

Alone: ``PYTHONPATH=src python -m hermes.bench.footprint [seconds]``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hermes.bench.interrupt import alone
from hermes.bench.startup import _healthy
from hermes.bench.system import child, port_flags, run_ports

COMMAND = "hermes run"
MESSAGES = 200  # to each topic
TARGET_MIB = 1024


def footprint(seconds: float = 300.0, every: float = 10.0, timeout: float = 300.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hermes-bench-footprint-") as directory:
        ports = run_ports()
        argv = [sys.executable, "-m", "hermes", "run", "--data-dir", directory, "--log-level", "WARNING"]
        argv += port_flags(ports)
        management = f"http://127.0.0.1:{ports['management']}"
        frontend = f"http://127.0.0.1:{ports['frontend']}"
        try:
            with child(argv, ports["management"]) as process:
                began = time.monotonic()
                while not (_healthy(f"{management}/status/health") and _healthy(f"{frontend}/status/health")):
                    if process.poll() is not None or time.monotonic() - began > timeout:
                        return {"command": COMMAND, "error": "hermes run did not become ready", "void": True}
                    time.sleep(0.1)
                _topics(management, frontend)
                samples: list[dict[str, dict[str, int]]] = []
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    time.sleep(every)
                    samples.append(_tree(process.pid))
                lake_files = len(list((Path(directory) / "pipeline" / "lake").rglob("*.parquet")))
        except RuntimeError as exc:  # it never listened
            return {"command": COMMAND, "error": str(exc), "void": True}
    return _summary(samples, seconds, lake_files)


def _topics(management: str, frontend: str) -> None:
    owner = {"source": "Plaintext", "id": "bench"}
    _call(f"{management}/groups", {"groupName": "footprint"})
    _call(
        f"{management}/topics",
        {
            "name": "footprint.archived",
            "description": "archived",
            "contentType": "JSON",
            "owner": owner,
            "offlineStorage": {"enabled": True},
        },
    )
    _call(
        f"{management}/topics",
        {
            "name": "footprint.tracked",
            "description": "tracked",
            "contentType": "JSON",
            "owner": owner,
            "trackingEnabled": True,
        },
    )
    for index in range(MESSAGES):
        for topic in ("footprint.archived", "footprint.tracked"):
            _call(f"{frontend}/topics/{topic}", {"index": index, "padding": "x" * 1000})


def _call(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def _tree(root: int) -> dict[str, dict[str, int]]:
    """Each process of ``root``'s tree by a name of its role: RSS and PSS in KiB."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        memory = _memory(pid)
        if memory is not None:
            tree[f"{_role(pid)} #{pid}"] = memory
    return tree


def _role(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = b" ".join(argv).decode(errors="replace")
    if "kafka.Kafka" in text:
        return "Kafka broker (JVM)"
    if "SparkSubmit" in text:
        return "Spark driver (JVM)"
    if "hermes pipeline" in text or argv[1:4] == [b"-m", b"hermes", b"pipeline"]:
        return "pipeline (Python)"
    if b"run" in argv[:5]:
        return "hermes run (Python)"
    return Path(argv[0].decode(errors="replace")).name


def _memory(pid: int) -> dict[str, int] | None:
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return None
    values = {line.split(":")[0]: int(line.split()[1]) for line in rollup[1:] if line.endswith("kB")}
    return {"rss_kib": values.get("Rss", 0), "pss_kib": values.get("Pss", 0)}


def _summary(samples: list[dict[str, dict[str, int]]], seconds: float, lake_files: int) -> dict[str, Any]:
    last = samples[len(samples) * 2 // 3 :] or samples
    roles = sorted({role.split(" #")[0] for sample in last for role in sample})

    def median(role: str, kind: str) -> float:
        values = [sum(v[kind] for r, v in sample.items() if r.split(" #")[0] == role) for sample in last]
        return round(statistics.median(values) / 1024, 1)

    processes = {role: {"rss_mib": median(role, "rss_kib"), "pss_mib": median(role, "pss_kib")} for role in roles}
    rss = round(statistics.median(sum(v["rss_kib"] for v in s.values()) for s in last) / 1024, 1)
    pss = round(statistics.median(sum(v["pss_kib"] for v in s.values()) for s in last) / 1024, 1)
    return {
        "command": COMMAND,
        "idle_seconds": seconds,
        "processes": processes,
        "total_rss_mib": rss,
        "total_pss_mib": pss,
        "target_mib": TARGET_MIB,
        "lake_files": lake_files,
        "void": lake_files == 0,  # the archive never wrote: the pipeline was not running what it should
    }


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0
    print(json.dumps(footprint(seconds), indent=1))


if __name__ == "__main__":
    alone(main)

"""Fixed-rate publish latency from ``hermes-openloop``, the benchmark's open-loop generator in C
(bench/openloop/openloop.c; ``make setup`` builds it into the virtualenv). A constant rate from the start time
over a fixed pool of keep-alive connections, each latency from the request's scheduled send time (corrected
for coordinated omission, as wrk2). Its own CPU is 26-39 µs per request at 2,000-20,000 requests/s, a third
of the benchmark's Python generator, which topped out near 15,000 requests/s and then measured its own
queueing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hermes.errors import StartupError

PROGRAM = "hermes-openloop"


def program() -> str:
    """The generator on PATH, else beside this interpreter (the virtualenv's bin, where setup builds it)."""
    search = os.pathsep.join([os.environ.get("PATH", ""), str(Path(sys.executable).parent)])
    found = shutil.which(PROGRAM, path=search)
    if found is None:
        raise StartupError(f"the benchmark needs {PROGRAM} (make setup builds it from bench/openloop/openloop.c)")
    return found


def command(connections: int) -> str:
    return f"{PROGRAM} -c{connections} (constant rate, keep-alive, POST; latency from the scheduled time)"


def run(
    url: str,
    body: bytes,
    rate: float,
    seconds: float,
    connections: int = 64,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One run at ``rate`` requests/s for ``seconds`` to ``url`` (http://IPV4:PORT/path): its JSON report
    (``sent``, ``answered``, ``codes``, ``errors``, ``throughput``, ``latency_ms`` p50-max,
    ``cpu_us_per_request``). Raises StartupError when the generator fails (bad arguments, no connection)."""
    with tempfile.NamedTemporaryFile(suffix=".body") as file:
        file.write(body)
        file.flush()
        argv = [program(), "-r", str(rate), "-d", str(seconds), "-c", str(connections), "-b", file.name]
        for name, value in (headers or {}).items():
            argv += ["-H", f"{name}: {value}"]
        done = subprocess.run([*argv, url], check=False, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise StartupError(done.stderr.strip() or f"{PROGRAM} exited with {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result

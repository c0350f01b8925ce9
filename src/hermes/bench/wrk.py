"""Closed-loop maxima from ``wrk`` (a load generator in C, Debian's package; ``make setup`` installs it), so that
the generator is not what limits the figure: the benchmark's own Python generator topped out near 15,000
requests/s, below the fastest Python servers."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

from hermes.bench.system import tree_cpu_seconds
from hermes.errors import StartupError

_SCRIPT = """wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
"""
# A header of its own per request (an Idempotency-Key): the prefix and a counter (one wrk thread)
_FRESH_HEADER = """local sent = 0
request = function()
  sent = sent + 1
  wrk.headers["{name}"] = "{prefix}-" .. sent
  return wrk.format()
end
"""
# Each connection waits this long after an answer before its next request: the rate held below the maximum
_PACED = """function delay()
  return {ms}
end
"""


def command(connections: int) -> str:
    return f"wrk -t1 -c{connections} (1 thread, keep-alive, POST)"


def run(
    url: str,
    body: bytes,
    seconds: float,
    connections: int,
    pid: int | None = None,
    headers: dict[str, str] | None = None,
    fresh: tuple[str, str] | None = None,
    pause_ms: float | None = None,
) -> dict[str, Any]:
    """One run: requests/s, non-2xx answers and socket errors; with ``pid``, that process's (and its children's)
    CPU time per request. ``headers`` are sent with every request besides Content-Type; ``fresh`` (a header's
    name, a prefix) one more, with a value of its own per request (wrk then builds each request in Lua, which
    costs the generator); ``pause_ms`` a pause of each connection between an answer and its next request (a
    rate below the maximum: ``connections`` / (latency + pause))."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise StartupError("the benchmark needs wrk (apt-get install wrk, or make setup)")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(_SCRIPT.format(body='"' + body.decode().replace('"', '\\"') + '"'))
        script.writelines(f'wrk.headers["{name}"] = "{value}"\n' for name, value in (headers or {}).items())
        if fresh is not None:
            script.write(_FRESH_HEADER.format(name=fresh[0], prefix=fresh[1]))
        if pause_ms is not None:
            script.write(_PACED.format(ms=pause_ms))
    try:
        before = tree_cpu_seconds(pid) if pid is not None else 0.0
        out = subprocess.run(
            [wrk, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", script.name, url],
            check=True,
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        ).stdout
        cpu = tree_cpu_seconds(pid) - before if pid is not None else 0.0
    finally:
        os.unlink(script.name)
    requests = int(_find(r"(\d+) requests in", out))
    result: dict[str, Any] = {
        "requests": requests,
        "throughput": float(_find(r"Requests/sec:\s+([\d.]+)", out)),
        "non_2xx": int(_find(r"Non-2xx or 3xx responses: (\d+)", out, "0")),
        "socket_errors": sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out)),
    }
    if pid is not None:
        result["server_cpu_us"] = round(cpu / max(requests, 1) * 1e6, 1)
    return result


def _find(pattern: str, text: str, default: str | None = None) -> str:
    match = re.search(pattern, text)
    if match is None:
        if default is None:
            raise RuntimeError(f"unexpected wrk output: {text!r}")
        return default
    return match.group(1)

"""Start-up: seconds from starting ``hermes run`` to its management and frontend answering ``/status/health``,
on a fresh data directory (the broker's log formatted, the metadata created) and again on the one it left; and
the seconds of a whole ``hermes --help`` and of an operator's call (``hermes topics list``) against that broker,
from process start to exit (target on a quiet machine: under 0.3 s)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes.bench.stats import summarize
from hermes.bench.system import port_flags, run_ports
from hermes.children import spawn_tied

# The pipeline is a child that `hermes run` starts beside the roles, not on their way to ready: left out, its
# Spark JVM would only take the cores the start-up is measured on.
_ARGV = ["run", "--no-pipeline"]
STARTUP_COMMAND = "hermes " + " ".join(_ARGV)
COMMAND_REPS = 5  # of each short command, per start of the broker


def startup(reps: int, timeout: float = 180.0) -> dict[str, Any]:
    fresh: list[float] = []
    existing: list[float] = []
    commands: dict[str, list[float]] = {"help": [], "cli": []}

    def short_commands(management_url: str) -> None:
        for _ in range(COMMAND_REPS):
            commands["help"].append(_seconds_to_exit(["--help"]))
            commands["cli"].append(_seconds_to_exit(["topics", "list", "--management-url", management_url]))

    try:
        for _ in range(reps):
            with tempfile.TemporaryDirectory(prefix="hermes-bench-start-") as directory:
                fresh.append(_seconds_to_ready(Path(directory), timeout))
                existing.append(_seconds_to_ready(Path(directory), timeout, short_commands))
    except RuntimeError as exc:
        return {"command": STARTUP_COMMAND, "error": str(exc), "void": True}
    return {
        "command": STARTUP_COMMAND,
        "fresh_s": summarize(fresh),
        "existing_s": summarize(existing),
        "help_s": summarize(commands["help"]),
        "cli_s": summarize(commands["cli"]),
    }


def _seconds_to_exit(args: list[str]) -> float:
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "hermes", *args], stdout=subprocess.DEVNULL, check=True, timeout=60)
    return time.monotonic() - began


def _seconds_to_ready(data_dir: Path, timeout: float, when_ready: Callable[[str], None] | None = None) -> float:
    ports = run_ports()
    argv = [sys.executable, "-m", "hermes", *_ARGV, "--data-dir", str(data_dir), "--log-level", "WARNING"]
    argv += port_flags(ports)
    urls = [f"http://127.0.0.1:{ports[role]}/status/health" for role in ("management", "frontend")]
    began = time.monotonic()
    process = spawn_tied(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not all(_healthy(url) for url in urls):
            if process.poll() is not None:
                raise RuntimeError(f"`{STARTUP_COMMAND}` exited with {process.returncode} before it was ready")
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"`{STARTUP_COMMAND}` was not ready within {timeout:.0f} s")
            time.sleep(0.02)
        ready = time.monotonic() - began
        if when_ready is not None:
            when_ready(f"http://127.0.0.1:{ports['management']}")
        return ready
    finally:
        process.terminate()  # stops its broker too, so that the next start finds the directory free
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except OSError:  # not listening yet, or not answering (URLError is an OSError)
        return False

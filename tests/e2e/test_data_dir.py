"""One data directory, one owner: a ``hermes run`` (or a frontend, whose journal lives there) locks it; the
consumers and management roles beside it share its SQLite metadata and use the broker ``hermes run`` started.
What runs is listed at start and logged to a file in the data directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hermes.broker.embedded import EmbeddedBroker, free_port
from hermes.config import flag
from hermes.config_sections import commands_of
from tests.support.hermes import HermesClient, HermesProcess

pytestmark = pytest.mark.e2e

PORTS = ("frontend_port", "management_port", "consumers_port")


def _refused(data_dir: Path, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``hermes <command>`` on ``data_dir`` and free ports, expected to exit at once (a timeout if it runs)."""
    ports = [arg for name in PORTS if command in commands_of(name) for arg in (flag(name), str(free_port()))]
    argv = [sys.executable, "-m", "hermes", command, "--data-dir", str(data_dir), *ports, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def _in_use_by_run(result: subprocess.CompletedProcess[str], data_dir: Path, run: HermesProcess) -> bool:
    assert run.process is not None
    expected = f"hermes: the data directory {data_dir} is in use by hermes run (pid {run.process.pid})"
    return result.returncode == 1 and result.stderr.startswith(expected) and "Traceback" not in result.stderr


def test_a_second_run_or_frontend_on_a_data_dir_is_refused(tmp_path: Path, kafka: EmbeddedBroker) -> None:
    """With an external cluster nothing else guards the SQLite file and the journal."""
    external = ("--kafka-bootstrap-servers", kafka.bootstrap_servers)
    run = HermesProcess(tmp_path, *external).start()
    try:
        assert _in_use_by_run(_refused(tmp_path, "run", "--no-pipeline", *external), tmp_path, run)
        assert _in_use_by_run(_refused(tmp_path, "frontend", *external), tmp_path, run)
        assert httpx.get(f"{run.management_url}/status/health").status_code == 200
    finally:
        assert run.stop() == 0


def test_roles_beside_a_run_share_its_broker_and_metadata(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    run = HermesProcess(data_dir).start()
    client = HermesClient(run.management_url, run.frontend_url)
    management = HermesProcess(data_dir, "--embedded-broker-port", str(run.kafka_port), command="management")
    try:
        group = client.create_group()
        management.start()
        assert group in httpx.get(f"{management.management_url}/groups").json()
        # the data-dir lock speaks before the embedded broker's own lock
        assert _in_use_by_run(_refused(data_dir, "run", "--no-pipeline"), data_dir, run)
    finally:
        client.close()
        if management.process is not None:
            assert management.stop() == 0
        assert run.stop() == 0


def test_a_role_without_a_running_broker_is_refused(tmp_path: Path) -> None:
    port = free_port()
    result = _refused(tmp_path, "consumers", "--embedded-broker-port", str(port))
    assert result.returncode == 1
    assert result.stderr.startswith(f"hermes: no Kafka broker at 127.0.0.1:{port}: start `hermes run` first")
    assert "Traceback" not in result.stderr


def test_the_banner_lists_what_runs_and_the_log_goes_to_the_data_dir(tmp_path: Path, kafka: EmbeddedBroker) -> None:
    run = HermesProcess(tmp_path, "--kafka-bootstrap-servers", kafka.bootstrap_servers).start()
    assert run.process is not None
    title = f"hermes run is running (pid {run.process.pid}); Ctrl-C stops it"
    assert run.stop() == 0
    log_file = tmp_path / "logs" / "hermes.log"
    banner = [
        f"  management  {run.management_url}",
        f"  console     {run.management_url}/ui/",
        f"  frontend    {run.frontend_url}",
        "  consumers   delivering in this process",
        f"  Kafka       {kafka.bootstrap_servers} (external)",
        f"  metadata    SQLite {tmp_path / 'metadata.sqlite3'}",
        "  auth        OFF: anyone who reaches the ports may do anything (allowed on loopback only)",
        "  pipeline    off (--no-pipeline)",
        f"  data dir    {tmp_path}",
        f"  log         {log_file}",
    ]
    for text in (run.log(), log_file.read_text()):
        lines = text.splitlines()
        [start] = [i for i, line in enumerate(lines) if line.endswith(title)]
        assert lines[start + 1 : start + 1 + len(banner)] == banner

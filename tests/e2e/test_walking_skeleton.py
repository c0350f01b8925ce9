"""The whole broker as users run it: the real ``hermes run`` process, the Apache Kafka broker it starts,
and a real subscriber HTTP server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hermes.broker.embedded import EmbeddedBroker, free_port
from hermes.cli import COMMANDS
from hermes.config import Settings
from tests.support.hermes import HermesClient, HermesProcess
from tests.support.subscriber import SubscriberServer

pytestmark = pytest.mark.e2e


def test_a_published_message_reaches_the_subscriber(tmp_path: Path, subscriber: SubscriberServer) -> None:
    hermes = HermesProcess(tmp_path).start()
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        topic = client.create_topic()
        client.publish(topic, '{"before": "subscription"}')  # must not be delivered
        client.create_subscription(topic, subscriber.url)

        body = '{"order": 1, "text": "zażółć"}'
        response = client.publish(topic, body)

        assert response.status_code == 201
        message_id = response.headers["Hermes-Message-Id"]
        [received] = subscriber.wait_for(1, timeout=30)
        assert received.body == body.encode()
        assert received.headers["Content-Type"] == "application/json"
        assert received.message_id == message_id
    finally:
        client.close()
        assert hermes.stop() == 0
    assert len(subscriber.received) == 1


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False)
    return [int(p) for p in out.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _delivers_one(client: HermesClient, subscriber: SubscriberServer) -> None:
    topic = client.create_topic()
    client.create_subscription(topic, subscriber.url)
    assert client.publish(topic, '{"n": 1}').status_code == 201
    subscriber.wait_for(1, timeout=30)


def test_run_starts_and_stops_cleanly_again_and_again(tmp_path: Path, subscriber: SubscriberServer) -> None:
    """No orphaned broker, no stuck port, exit code 0 on SIGTERM; a terminal's Ctrl-C behaves the same. Ctrl-C
    signals the whole process group: the embedded broker must not stop first, or the consumers' last commits and
    the producers' last sends fail against a broker that is gone."""
    for ctrl_c in (False, True):  # SIGTERM, then Ctrl-C on the same data directory
        hermes = HermesProcess(tmp_path / "data")
        logged_before = len(hermes.log())  # the log of the run before on this data directory
        hermes.start(own_group=ctrl_c)
        assert hermes.process is not None
        children = _children(hermes.process.pid)
        assert children, "the embedded broker should run as a child process"
        if ctrl_c:
            client = HermesClient(hermes.management_url, hermes.frontend_url)
            try:
                _delivers_one(client, subscriber)
            finally:
                client.close()
                assert hermes.interrupt() == 0
            logged = hermes.log()[logged_before:].splitlines()
            errors = [line for line in logged if " ERROR " in line or "Traceback" in line]
            assert errors == []
        else:
            assert hermes.stop(signal.SIGTERM) == 0
        assert not any(_alive(c) for c in children), "the embedded broker outlived hermes"
        for port in (hermes.frontend_port, hermes.management_port):
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))  # the port is free again


def _run_expecting_failure(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run_expecting_failure(
            "run", "--data-dir", str(tmp_path), "--frontend-port", str(port), "--management-port", str(free_port())
        )
    assert result.returncode == 1
    assert f"frontend port 127.0.0.1:{port} is not available" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unwritable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = _run_expecting_failure(
        "run", "--data-dir", str(blocker / "data"), "--frontend-port", "0", "--management-port", "0"
    )
    assert result.returncode == 1
    assert "data directory" in result.stderr and "not writable" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_external_kafka_is_a_clear_error(tmp_path: Path) -> None:
    result = _run_expecting_failure(
        "run",
        "--data-dir",
        str(tmp_path),
        "--frontend-port",
        "0",
        "--management-port",
        "0",
        "--kafka-bootstrap-servers",
        f"127.0.0.1:{free_port()}",
        "--kafka-connect-timeout",
        "2",
    )
    assert result.returncode == 1
    assert "did not answer within 2 s" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_external_kafka_is_used_instead_of_the_embedded_one(
    tmp_path: Path, kafka: EmbeddedBroker, subscriber: SubscriberServer
) -> None:
    hermes = HermesProcess(tmp_path, "--kafka-bootstrap-servers", kafka.bootstrap_servers).start()
    client = HermesClient(hermes.management_url, hermes.frontend_url)
    try:
        assert hermes.process is not None
        assert _children(hermes.process.pid) == [], "no embedded broker with an external cluster"
        _delivers_one(client, subscriber)
    finally:
        client.close()
        hermes.stop()


def test_help_documents_every_setting() -> None:
    """Each command's help lists the settings it uses (tests/e2e/test_cli.py); together they list every one."""
    helps = [_run_expecting_failure(command, "--help").stdout for command in COMMANDS]
    for name in Settings.model_fields:
        assert any("--" + name.replace("_", "-") in text for text in helps), name

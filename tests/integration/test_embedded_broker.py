"""The embedded Apache Kafka broker's start-up errors speak to the user: each names the cause and the way out."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hermes.broker.embedded import EmbeddedBroker, ephemeral_ports, wait_until_port_free
from hermes.errors import StartupError
from tests.support.ports import connect_to_itself, connectable_port

pytestmark = pytest.mark.integration


def test_a_directory_in_use_and_a_taken_port_are_refused(kafka: EmbeddedBroker) -> None:
    with pytest.raises(StartupError, match=r"directory .* is in use by an embedded Kafka broker \(pid \d+\)"):
        EmbeddedBroker(kafka.directory).start()
    with pytest.raises(StartupError, match=f"port 127.0.0.1:{kafka.port} is not available"):
        EmbeddedBroker(kafka.directory.parent / "another", port=kafka.port).start()


def test_a_damaged_log_directory_is_named_with_the_broker_s_own_words(tmp_path: Path) -> None:
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    (log_dir / "meta.properties").write_text("version=1\nnode.id=7\n")  # no cluster.id: not one of ours
    damaged = r"exited at start-up: its log directory .* looks damaged: .*meta\.properties"
    with pytest.raises(StartupError, match=damaged):
        EmbeddedBroker(tmp_path).start()


def test_missing_jars_and_a_missing_java_say_run_make_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_JARS_DIR", str(tmp_path / "nothing"))
    with pytest.raises(StartupError, match=r"kafka jars are missing .*run `make setup`"):
        EmbeddedBroker(tmp_path / "a").start()
    monkeypatch.delenv("HERMES_JARS_DIR")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java"))
    with pytest.raises(StartupError, match=r"needs Java 17 or later.*run `make setup`"):
        EmbeddedBroker(tmp_path / "b").start()


def test_the_broker_s_own_port_lies_outside_the_ephemeral_range(kafka: EmbeddedBroker) -> None:
    """Started on port 0, as the session's broker is: no connection of the machine can take its port."""
    assert kafka.port not in ephemeral_ports()


def test_a_port_held_by_a_connection_to_itself_is_waited_out_and_a_listener_is_refused_at_once() -> None:
    port = connectable_port()
    holder = connect_to_itself(port)
    release = threading.Timer(0.5, holder.close)
    release.start()
    started = time.monotonic()
    wait_until_port_free("127.0.0.1", port, "embedded Kafka broker", timeout=30)
    assert time.monotonic() - started >= 0.4
    release.join()

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        started = time.monotonic()
        with pytest.raises(StartupError, match=f"port 127.0.0.1:{port} is not available"):
            wait_until_port_free("127.0.0.1", port, "embedded Kafka broker", timeout=30)
        assert time.monotonic() - started < 5


def test_the_offsets_of_a_group_never_seen_are_asked_of_a_broker_just_started_without_a_crash(tmp_path: Path) -> None:
    # librdkafka 2.16's admin OffsetFetch crashed the process when the group's coordinator was not ready yet (see
    # BrokerAdmin._group_exists): asked in a process of its own, so that a crash fails this test, not the session
    broker = EmbeddedBroker(tmp_path)
    broker.start()
    try:
        script = (
            "from hermes.broker.admin import BrokerAdmin\n"
            "from hermes.broker.connection import KafkaConnection\n"
            f"admin = BrokerAdmin(KafkaConnection({broker.bootstrap_servers!r}, ()))\n"
            "admin.create_topic('fresh', partitions=2)\n"
            "print(admin.committed('never-seen', 'fresh'))\n"
        )
        done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stdout.strip()) == (0, "{}"), done.stderr[-2000:]
    finally:
        broker.stop()

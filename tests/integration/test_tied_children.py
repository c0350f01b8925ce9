"""The servers a test session starts die with it, even when it is SIGKILLed midway: each is forked by the one
thread of ``hermes.children`` that lives as long as the process, though here a thread that has ended asked."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hermes import alive
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# Starts the server from a thread that ends, prints the JVM's pid, then waits to be killed.
_SESSION = """
import sys, threading, time
from pathlib import Path
{imports}
servers = []
starting = threading.Thread(target=lambda: servers.append({server}.start(timeout=120)))
starting.start()
starting.join()
print(servers[0]._process.pid, flush=True)
time.sleep(600)
"""
SERVERS = {
    "zookeeper": ("from hermes.bench.zookeeper import ZookeeperServer", "ZookeeperServer(Path(sys.argv[1]))"),
    "activemq": ("from tests.support.activemq import ActiveMqServer", "ActiveMqServer(Path(sys.argv[1]))"),
}


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_a_server_dies_with_the_session_that_started_it(name: str, tmp_path: Path) -> None:
    imports, server = SERVERS[name]
    script = _SESSION.format(imports=imports, server=server)
    jvm = 0
    with subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, cwd=Path(__file__).parents[2]
    ) as session:
        try:
            assert session.stdout is not None
            line = session.stdout.readline()
            assert line, f"the session exited with {session.wait()} before its {name} started"
            jvm = int(line)
            assert alive(jvm), "the JVM died with the thread that asked for it"
            session.kill()
            session.wait()
            wait_until(lambda: not alive(jvm), timeout=10)
        finally:
            session.kill()
            if jvm:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(jvm, signal.SIGKILL)

"""A real Apache ActiveMQ broker (Debian's ``activemq`` package) for the tests of ``jms://`` endpoints, run as a
process of the test session's own: a free port on 127.0.0.1, only the STOMP connector, a login, its store in a
temporary directory. The login may use every destination whose name has no dot (``FORBIDDEN`` has one). And a
STOMP consumer (stomp.py) that reads what Hermes delivered there."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import stomp

from hermes.broker.embedded import free_port
from hermes.children import spawn_tied
from tests.support.waiting import wait_until

ACTIVEMQ_HOME = Path("/usr/share/activemq")
USER, PASSWORD = "hermes", "amq-s3cret-password"
FORBIDDEN = "queue/forbidden.orders"  # a destination the login may not write to

_CONFIG = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans
    http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
    http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="hermes-tests" useJmx="false"
          dataDirectory="{data}">
    <persistenceAdapter><kahaDB directory="{data}/kahadb"/></persistenceAdapter>
    <plugins>
      <simpleAuthenticationPlugin>
        <users><authenticationUser username="{user}" password="{password}" groups="users"/></users>
      </simpleAuthenticationPlugin>
      <authorizationPlugin><map><authorizationMap><authorizationEntries>
        <authorizationEntry queue="*" read="users" write="users" admin="users"/>
        <authorizationEntry topic="*" read="users" write="users" admin="users"/>
        <authorizationEntry topic="ActiveMQ.Advisory.>" read="users" write="users" admin="users"/>
      </authorizationEntries></authorizationMap></map></authorizationPlugin>
    </plugins>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}"/>
    </transportConnectors>
  </broker>
</beans>
"""


class ActiveMqServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def endpoint(self, destination: str, password: str = PASSWORD) -> str:
        """A ``jms://`` endpoint of ``destination`` (``queue/NAME``, ``topic/NAME`` or ``NAME``) with a login."""
        return f"jms://{USER}:{password}@127.0.0.1:{self.port}/{destination}"

    def start(self, timeout: float = 60.0) -> ActiveMqServer:
        java = shutil.which("java")
        if java is None or not (ACTIVEMQ_HOME / "bin" / "activemq.jar").exists():
            raise RuntimeError("ActiveMQ is not installed: run scripts/setup.sh (Debian package 'activemq')")
        data = self.workdir / "data"
        config = self.workdir / "activemq.xml"
        config.write_text(_CONFIG.format(data=data, port=self.port, user=USER, password=PASSWORD))
        with open(self.workdir / "activemq.log", "ab") as log:  # the child keeps its own descriptor
            self._process = spawn_tied(  # no ActiveMQ left behind by a test run killed midway
                [
                    java,
                    "-Xmx256m",
                    f"-Dactivemq.home={ACTIVEMQ_HOME}",
                    f"-Dactivemq.base={self.workdir}",
                    f"-Dactivemq.conf={self.workdir}",
                    f"-Dactivemq.data={data}",
                    "-jar",
                    str(ACTIVEMQ_HOME / "bin" / "activemq.jar"),
                    "start",
                    f"xbean:file:{config}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"ActiveMQ exited: {(self.workdir / 'activemq.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ActiveMQ did not start within {timeout} s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


@dataclass(frozen=True)
class JmsMessage:
    headers: dict[str, str]
    body: bytes


class StompReader(stomp.ConnectionListener):  # type: ignore[misc]
    """A consumer of one destination (``/queue/NAME`` or ``/topic/NAME``), collecting what arrives."""

    def __init__(self, broker: ActiveMqServer, destination: str) -> None:
        self.messages: list[JmsMessage] = []
        self._lock = threading.Lock()
        self._subscribed = threading.Event()
        self._connection = stomp.Connection12([("127.0.0.1", broker.port)], auto_decode=False)
        self._connection.set_listener("reader", self)
        self._connection.connect(USER, PASSWORD, wait=True)
        self._connection.subscribe(destination, id="1", ack="auto", headers={"receipt": "subscribed"})
        assert self._subscribed.wait(10), f"no receipt for the subscription to {destination}"

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        self._subscribed.set()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        with self._lock:
            self.messages.append(JmsMessage(dict(frame.headers), frame.body))

    def wait_for(self, count: int, timeout: float = 30.0) -> list[JmsMessage]:
        wait_until(lambda: len(self.messages) >= count, timeout=timeout)
        with self._lock:
            return list(self.messages)

    def close(self) -> None:
        self._connection.disconnect()

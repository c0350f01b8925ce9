"""A local Spark Connect server, started from the pyspark package (its jars include spark-connect), with Spark's
Kafka connector from ``make setup``."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from hermes.broker.embedded import free_port
from hermes.children import spawn_tied
from hermes.pipeline.session import DELTA_SETTINGS, pipeline_jars
from tests.conftest import wait_until

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


class SparkConnectServer:
    """``spark-submit --class SparkConnectServer`` on ``local[2]``, listening on a free 127.0.0.1 port. Its
    Python workers run this interpreter with this process's ``sys.path``, so they import the same hermes."""

    def __init__(self, work_dir: Path, master: str = "local[2]", kafka_connector: bool = True) -> None:
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.log_path = work_dir / "spark-connect.log"
        self._work_dir = work_dir
        self._master = master
        self._jars = ["--jars", pipeline_jars()] if kafka_connector else []
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> SparkConnectServer:
        return self.launch().wait_until_ready(timeout)

    def launch(self) -> SparkConnectServer:
        """Starts the JVM without waiting for it."""
        import pyspark

        home = Path(pyspark.__file__).parent
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        command = [
            str(home / "bin" / "spark-submit"),
            "--class", SERVER_CLASS,
            "--name", "hermes-tests-connect",
            *self._jars,
            "--master", self._master,
            "--conf", f"spark.connect.grpc.binding.port={self.port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.driver.memory=1g",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2",
            "--conf", f"spark.local.dir={self._work_dir}",
            "--conf", f"spark.sql.warehouse.dir={self._work_dir / 'warehouse'}",
            *(arg for key, value in DELTA_SETTINGS.items() for arg in ("--conf", f"{key}={value}")),
        ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.process = spawn_tied(
                command,
                env=env,
                cwd=self._work_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stop() ends the JVM and its Python workers
            )
        return self

    def wait_until_ready(self, timeout: float = 120.0) -> SparkConnectServer:
        process = self.process
        assert process is not None, "launch() first"

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"Spark Connect server exited ({process.returncode}): {self.log_tail()}")
            return _answers(self.port)

        try:
            wait_until(ready, timeout=timeout, interval=0.5)
        except BaseException:
            self.stop()
            raise
        return self

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop_group(process, timeout)


def stop_group(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Ends a JVM started in a process group of its own (``start_new_session``): SIGTERM, then SIGKILL, and
    SIGKILL for what it started (executors, Python workers) that outlived it."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)

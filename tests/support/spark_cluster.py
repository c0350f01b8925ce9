"""A Spark standalone cluster started from the pyspark package: a master and two workers on 127.0.0.1, each its
own JVM (``bin/spark-class``), so the pipeline's driver, executors and their Python workers are separate
processes as on a real cluster."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

from hermes.broker.embedded import free_port
from hermes.children import spawn_tied
from tests.conftest import wait_until
from tests.support.spark_connect import stop_group

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class SparkStandaloneCluster:
    """``spark://127.0.0.1:PORT`` with ``workers`` workers of ``cores`` cores and 1 GiB for executors each (one
    default-sized executor per worker). Web UIs are on free ports: the master's JSON page says when every
    worker has registered."""

    def __init__(self, work_dir: Path, workers: int = 2, cores: int = 2) -> None:
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.ui_port = free_port()
        self._work_dir = work_dir
        self._workers = workers
        self._cores = cores
        self.worker_dirs = [work_dir / f"worker-{n}" for n in range(workers)]
        self.processes: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, *args: str) -> None:
        import pyspark

        home = Path(pyspark.__file__).parent
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",  # the master and workers only schedule; executors get their own JVMs
        }
        with open(self._work_dir / f"{name}.log", "ab") as log:
            self.processes.append(
                spawn_tied(
                    [str(home / "bin" / "spark-class"), *args],
                    env=env,
                    cwd=self._work_dir,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own process group: stop() ends it with its executors
                )
            )

    def alive_workers(self) -> int:
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a Spark cluster process exited ({process.returncode}): {self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as reply:
                return int(json.load(reply)["aliveworkers"])
        except (OSError, ValueError):
            return 0  # the master is still starting: no answer yet, or an empty or partial page

    def start(self, timeout: float = 120.0) -> SparkStandaloneCluster:
        return self.launch().wait_until_ready(timeout)

    def launch(self) -> SparkStandaloneCluster:
        """Starts the master and the workers without waiting for them (from the thread they must die with)."""
        self._spawn("master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                    "--webui-port", str(self.ui_port))  # fmt: skip
        for n, work_dir in enumerate(self.worker_dirs):
            work_dir.mkdir(parents=True, exist_ok=True)
            self._spawn(
                f"worker-{n}", WORKER_CLASS, "--host", "127.0.0.1", "--webui-port", str(free_port()),
                "--cores", str(self._cores), "--memory", "1g", "--work-dir", str(work_dir), self.url,
            )  # fmt: skip
        return self

    def wait_until_ready(self, timeout: float = 120.0) -> SparkStandaloneCluster:
        try:
            wait_until(lambda: self.alive_workers() == self._workers, timeout=timeout, interval=0.5)
        except BaseException:
            self.stop()
            raise
        return self

    def executor_logs(self, worker: int) -> list[Path]:
        """The stderr files of the executors this worker ran (``<work dir>/<app id>/<executor id>/stderr``)."""
        return sorted(self.worker_dirs[worker].glob("app-*/*/stderr"))

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(
            f"{log.name}: {line}"
            for log in sorted(self._work_dir.glob("*.log"))
            for line in log.read_text(errors="replace").splitlines()[-lines:]
        )

    def stop(self) -> None:
        processes, self.processes = self.processes, []
        for process in reversed(processes):  # workers first, so the master sees no worker lost meanwhile
            stop_group(process)

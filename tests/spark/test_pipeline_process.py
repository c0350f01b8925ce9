"""``hermes run`` runs the pipeline as its child, tied to it."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from hermes.broker.embedded import EmbeddedBroker
from tests.conftest import wait_until
from tests.support.hermes import HermesProcess, alive, children


def test_hermes_run_starts_the_pipeline_as_a_child_that_dies_with_it(kafka: EmbeddedBroker, tmp_path: Path) -> None:
    # on the session's broker: an embedded one of its own would only add its start-up to the test's time
    broker = ("--kafka-bootstrap-servers", kafka.bootstrap_servers)
    hermes = HermesProcess(tmp_path, *broker, "--pipeline-jobs", "archive", "--spark-master", "local[1]", pipeline=True)
    hermes.start()
    try:
        wait_until(lambda: re.search(r"pipeline started \(pid (\d+)\)", hermes.log()), timeout=30)
        match = re.search(r"pipeline started \(pid (\d+)\)", hermes.log())
        assert match is not None
        child = int(match.group(1))
        pipeline_log = tmp_path / "logs" / "pipeline.log"
        wait_until(lambda: pipeline_log.exists() and "pipeline running" in pipeline_log.read_text(), timeout=120)
        assert alive(child)
        spark_jvm = children(child)
        assert spark_jvm, "the pipeline runs Spark's JVM as its child"
    finally:
        hermes.stop(signal.SIGKILL)

    wait_until(lambda: not alive(child), timeout=30)  # PR_SET_PDEATHSIG: no orphaned pipeline...
    wait_until(lambda: not any(alive(pid) for pid in spark_jvm), timeout=30)  # ...nor its JVM

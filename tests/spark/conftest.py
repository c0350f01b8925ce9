"""The Spark tier: one local SparkSession for the whole tier (starting Spark takes 10+ s). The tier's fixtures are
the package's: its JVMs stop when its last test ends, not idle beside the rest of its worker's modules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from tests.support.spark_cluster import SparkStandaloneCluster
from tests.support.spark_connect import SparkConnectServer


@pytest.fixture(scope="package")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A classic ``local[2]`` SparkSession, small and quiet, shared by every Spark test: use unique names for
    topics, checkpoints and lake directories, and stop every streaming query you start."""
    from hermes.pipeline.session import build_session

    warehouse: Path = tmp_path_factory.mktemp("spark-warehouse")
    session = build_session(master="local[2]", app_name="hermes-tests", local_dir=warehouse)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


class SparkServers:
    """The Spark Connect servers and the standalone cluster the tier's tests use, launched together."""

    def __init__(self, base: pytest.TempPathFactory, wanted: set[str]) -> None:
        self.connect = SparkConnectServer(base.mktemp("spark-connect")) if "spark_connect" in wanted else None
        self.connect_without_kafka = (
            SparkConnectServer(base.mktemp("spark-connect-bare"), master="local[1]", kafka_connector=False)
            if "spark_connect_without_kafka" in wanted
            else None
        )
        self.cluster = SparkStandaloneCluster(base.mktemp("spark-cluster")) if "spark_cluster" in wanted else None

    def _all(self) -> list[SparkConnectServer | SparkStandaloneCluster]:
        return [s for s in (self.connect, self.connect_without_kafka, self.cluster) if s is not None]

    def launch(self) -> None:
        for server in self._all():
            server.launch()

    def wait_until_ready(self) -> None:
        for server in self._all():
            server.wait_until_ready()

    def stop(self) -> None:
        for server in self._all():
            server.stop()


@pytest.fixture(scope="package", autouse=True)
def spark_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkServers]:
    """Before the first test of the tier, starts the servers that its later tests use (by their fixtures) side by
    side, instead of one after another in the setup of the first test that needs each. It waits for them: five
    JVMs starting beside the tier's first tests made those tests' waits run out on 2 cores."""
    wanted = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    servers = SparkServers(tmp_path_factory, wanted)
    try:
        servers.launch()
        servers.wait_until_ready()
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="package")
def spark_connect(spark_servers: SparkServers) -> SparkConnectServer:
    """A local Spark Connect server for the tests that run the pipeline through ``--spark-remote``; stopped,
    with its JVM, at the end of the tier."""
    assert spark_servers.connect is not None
    return spark_servers.connect.wait_until_ready()


@pytest.fixture(scope="package")
def spark_connect_without_kafka(spark_servers: SparkServers) -> SparkConnectServer:
    """A Spark Connect server started without Spark's Kafka connector, on one core."""
    assert spark_servers.connect_without_kafka is not None
    return spark_servers.connect_without_kafka.wait_until_ready()


@pytest.fixture(scope="package")
def spark_cluster(spark_servers: SparkServers) -> SparkStandaloneCluster:
    """A Spark standalone cluster (a master and two workers, separate JVMs) for the tests that run the pipeline
    with ``--spark-master spark://...``; stopped with its executors at the end of the tier."""
    assert spark_servers.cluster is not None
    return spark_servers.cluster.wait_until_ready()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/spark/ carries the ``spark`` tier marker."""
    for item in items:
        if "tests/spark/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.spark)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran ``hermes pipeline`` shows the end of its log (and of the Spark Connect server's):
    CI prints nothing else of them."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    pipeline = funcargs.get("pipeline")
    process = getattr(pipeline, "process", None)
    if process is not None:
        report.sections.append(("hermes pipeline log (end)", "\n".join(process.log().splitlines()[-80:])))
    server = funcargs.get("spark_connect")
    if isinstance(server, SparkConnectServer) and server.log_path.exists():
        lines = server.log_path.read_text(errors="replace").splitlines()[-40:]
        report.sections.append(("Spark Connect server log (end)", "\n".join(lines)))

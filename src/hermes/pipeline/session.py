"""Building the SparkSession the pipeline runs on: classic local/cluster mode or Spark Connect."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hermes.errors import StartupError
from hermes.jars import jar_paths
from hermes.pipeline.connector import KAFKA_FORMAT
from hermes.pipeline.lake import BODY_COLUMN

# Delta Lake, the lake's table format: its SQL (DELETE, OPTIMIZE, VACUUM, CONVERT TO DELTA, time travel) and the
# catalog that reads path tables (delta.`<path>`).
DELTA_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


# The driver JVM (with a local master, the executors too) holds about 200 MiB of Spark's, Delta's and Scala's classes
# whatever its heap. The serial collector starts the heap small (the JVM's default is 1/64 of the machine's memory,
# touched early) and grows it only as far as the work needs, keeping 40-70 % of it free after a full collection:
# an idle pipeline keeps a small heap, while an archive batch of a backlog, whose live data (Kafka's fetches,
# Parquet's pages) reaches 250-350 MiB, gets room up to --pipeline-driver-memory. Without that room (a 512m bound,
# or only 10-30 % kept free) promotions fail and a full collection follows, every batch: a third of the speed.
# glibc's per-thread malloc arenas (8 per core by default) hold tens of MiB of the JVM's native allocations that two
# arenas serve as well.
DRIVER_JAVA_OPTIONS = "-XX:+UseSerialGC -Xms64m"
_MALLOC_ARENAS = "2"


def pipeline_jars() -> str:
    """The value of ``spark.jars``: Spark's Kafka connector and Delta Lake (``make setup``), as local paths."""
    return ",".join(str(path) for name in ("spark", "delta") for path in jar_paths(name))


def build_session(
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "hermes-pipeline",
    local_dir: Path | None = None,
    shuffle_partitions: int = 2,
    driver_memory: str = "1g",
) -> Any:
    """A SparkSession with Spark's Kafka connector and Delta Lake.

    ``remote`` (``sc://host:port``) selects Spark Connect (needs ``pyspark[connect]``; the server must have been
    started with the jars and ``DELTA_SETTINGS``); otherwise ``master``, and the session gets them from here.
    The settings keep a small local pipeline light: few shuffle partitions (the archive has no shuffle,
    tracking aggregates a little), no UI, and Python workers running this interpreter so they can import
    hermes.
    """
    from pyspark.sql import SparkSession

    # Executors' Python workers must see the same interpreter (and so the same hermes) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("MALLOC_ARENA_MAX", _MALLOC_ARENAS)  # read by the driver JVM pyspark starts
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        builder = (
            builder.master(master)
            .config("spark.jars", pipeline_jars())
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
            # Spark keeps the last 1,000 jobs, stages and SQL executions (100,000 tasks) for its UI even without
            # one: a query's micro-batch a second fills that in minutes, a heap that grows for a quarter of an hour
            .config("spark.ui.retainedJobs", "50")
            .config("spark.ui.retainedStages", "50")
            .config("spark.ui.retainedTasks", "1000")
            .config("spark.sql.ui.retainedExecutions", "20")
            .config("spark.sql.streaming.stopActiveRunOnRestart", "true")
        )
        for key, value in DELTA_SETTINGS.items():
            builder = builder.config(key, value)
        if local_dir is not None:
            builder = builder.config("spark.local.dir", str(local_dir)).config(
                "spark.sql.warehouse.dir", str(local_dir / "warehouse")
            )
    session = builder.getOrCreate()
    if not remote:
        session.sparkContext.setLogLevel("WARN")
    session.conf.set("spark.sql.session.timeZone", "UTC")  # lake hours are UTC hours
    session.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")  # a header sent twice keeps its last value
    # Delta rebuilds a table's state from its log in this many tasks (50 by default: seconds per DELETE,
    # OPTIMIZE or read on a small machine), and VACUUM lists the table's directories in this many (10,000)
    session.conf.set("spark.databricks.delta.snapshotPartitions", str(shuffle_partitions))
    session.conf.set("spark.sql.sources.parallelPartitionDiscovery.parallelism", str(shuffle_partitions))
    # VACUUM's retention is the pipeline_vacuum_retention_hours setting, not Delta's 7-day floor
    session.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    # No checksum file (<version>.crc, optional in the protocol) after each commit: writing it rebuilds the table's
    # state at every commit (about 0.5-1 s of JVM CPU per 100,000 archived messages, measured at a high load)
    session.conf.set("spark.databricks.delta.writeChecksumFile.enabled", "false")
    # The lake's body column holds opaque payloads: nobody filters on their byte order, and a dictionary of them
    # rarely pays. Parquet computes both per value (hashing, comparing whole bodies), about a seventh of the
    # archive's task CPU for 1 KB bodies. Parquet's per-column settings, which Spark passes on to every file write.
    for setting in ("parquet.enable.dictionary", "parquet.column.statistics.enabled", "parquet.column.index.enabled"):
        session.conf.set(f"{setting}#{BODY_COLUMN}", "false")
    if remote:
        _require_connector(session, remote)
    return session


def _require_connector(session: Any, remote: str) -> None:
    """Fails at start, not at the first query, when the Spark Connect server lacks the Kafka connector."""
    reader = session.read.format(KAFKA_FORMAT).option("kafka.bootstrap.servers", "-").option("subscribe", "-")
    try:  # analysing a read finds the data source on the server; nothing connects to Kafka
        reader.load().schema  # noqa: B018 - asked for its side effect: the server resolves the source
    except Exception as exc:
        if "failed to find data source: kafka" not in str(exc).lower():
            raise
        raise StartupError(
            f"the Spark Connect server {remote} has no Kafka connector: start it with --jars and the jars that "
            "`make setup` puts in <venv>/share/hermes/jars/spark (see docs/pipeline.md)"
        ) from None

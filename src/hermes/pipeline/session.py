"""Building the SparkSession the pipeline runs on: classic local/cluster mode or Spark Connect."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hermes.errors import StartupError
from hermes.pipeline.connector import KAFKA_FORMAT, connector_jars


def build_session(
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "hermes-pipeline",
    local_dir: Path | None = None,
    shuffle_partitions: int = 2,
) -> Any:
    """A SparkSession with Spark's Kafka connector.

    ``remote`` (``sc://host:port``) selects Spark Connect (needs ``pyspark[connect]``; the server must have been
    started with the connector's jars); otherwise ``master``, and the session gets the jars from here.
    The settings keep a small local pipeline light: few shuffle partitions (the archive has no shuffle,
    tracking aggregates a little), no UI, and Python workers running this interpreter so they can import
    hermes.
    """
    from pyspark.sql import SparkSession

    # Executors' Python workers must see the same interpreter (and so the same hermes) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        builder = (
            builder.master(master)
            .config("spark.jars", connector_jars())
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.driver.memory", "1g")
            .config("spark.sql.streaming.stopActiveRunOnRestart", "true")
        )
        if local_dir is not None:
            builder = builder.config("spark.local.dir", str(local_dir)).config(
                "spark.sql.warehouse.dir", str(local_dir / "warehouse")
            )
    session = builder.getOrCreate()
    if not remote:
        session.sparkContext.setLogLevel("WARN")
    session.conf.set("spark.sql.session.timeZone", "UTC")  # lake hours are UTC hours
    session.conf.set("spark.sql.mapKeyDedupPolicy", "LAST_WIN")  # a header sent twice keeps its last value
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

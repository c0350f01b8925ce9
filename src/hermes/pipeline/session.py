"""Building the SparkSession the pipeline runs on: classic local/cluster mode or Spark Connect."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hermes.pipeline.kafka_source import KafkaSource


def build_session(
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "hermes-pipeline",
    local_dir: Path | None = None,
    shuffle_partitions: int = 2,
) -> Any:
    """A SparkSession with the Kafka source registered.

    ``remote`` (``sc://host:port``) selects Spark Connect (needs ``pyspark[connect]``); otherwise ``master``.
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
    session.dataSource.register(KafkaSource)
    return session

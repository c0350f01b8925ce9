"""The ``hermes pipeline`` process: one SparkSession and the jobs that run on it.

Adding a job: write a class with ``name: str``, ``__init__(self, context: PipelineContext)``, ``start()``
(returns promptly; run long work on the job's own thread or as a streaming query) and ``stop()`` (most jobs
subclass :class:`hermes.pipeline.job.LoopingJob`), then add its ``"module:Class"`` path to ``JOBS`` below.
Jobs start in that order and stop in reverse order. Each job keeps its checkpoints under
``context.checkpoints/<its name>``.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import SecretStr

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import ensure_port_free
from hermes.children import spawn_tied
from hermes.config import ENV_PREFIX, Settings
from hermes.errors import StartupError
from hermes.metadata.factory import open_repository
from hermes.metadata.repository import MetadataRepository
from hermes.pipeline.job import Job
from hermes.pipeline.lake import Lake
from hermes.pipeline.traces import checkpoint_root

log = logging.getLogger(__name__)

JOBS: tuple[str, ...] = (
    "hermes.pipeline.offline_storage:ArchiveJob",
    "hermes.pipeline.tracking_job:TrackingJob",
    "hermes.pipeline.retransmission:RetransmissionJob",
)


@dataclass(frozen=True)
class PipelineContext:
    """What every job gets: the session, the cluster, the metadata and where to keep its files."""

    settings: Settings
    spark: Any
    connection: KafkaConnection
    repository: MetadataRepository
    lake: Lake
    checkpoints: str  # directory or URI; one subdirectory per job
    trigger_interval: float  # seconds between micro-batches
    max_records_per_batch: int | None
    retention_interval: float  # seconds between retention checks


def load_job(path: str) -> type[Any]:
    module, _, attribute = path.partition(":")
    job: type[Any] = getattr(importlib.import_module(module), attribute)
    return job


def selected_jobs(settings: Settings) -> list[type[Any]]:
    jobs = [load_job(path) for path in JOBS]
    wanted = {name.strip() for name in settings.pipeline_jobs.split(",") if name.strip()}
    if "all" in wanted:
        return jobs
    unknown = wanted - {job.name for job in jobs}
    if unknown:
        known = ", ".join(job.name for job in jobs)
        raise StartupError(f"pipeline_jobs: no job named {', '.join(sorted(unknown))} (the jobs: {known})")
    return [job for job in jobs if job.name in wanted]


def lake_root(settings: Settings) -> str:
    return settings.pipeline_lake or str((settings.data_dir / "pipeline" / "lake").absolute())


class Pipeline:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.spark: Any = None
        self.repository: MetadataRepository | None = None
        self.jobs: list[Job] = []
        self.status: Any = None

    def start(self) -> None:
        from hermes.http.edge import EdgeLimits
        from hermes.pipeline.connector import client_options
        from hermes.pipeline.driver_heap import HeapRelease
        from hermes.pipeline.prometheus import StatusServer
        from hermes.pipeline.session import build_session
        from hermes.security.scrape import scrape_guard
        from hermes.security.setup import Security

        settings = self.settings
        if settings.kafka_bootstrap_servers is None:
            raise StartupError(
                "hermes pipeline needs the Kafka cluster (--kafka-bootstrap-servers); `hermes run` passes its own"
            )
        security = Security.from_settings(settings)
        security.check_listener(settings.host, "pipeline status")
        ensure_port_free(settings.host, settings.pipeline_port, "pipeline status")
        self.status = StatusServer(
            settings.host, settings.pipeline_port, scrape_guard(security), EdgeLimits.of(settings)
        )
        self.status.start()
        connection = KafkaConnection.from_settings(settings, settings.kafka_bootstrap_servers)
        client_options(connection)  # settings the Kafka connector cannot use fail here, not in every query
        with BrokerAdmin(connection) as admin:
            admin.wait_until_reachable(settings.kafka_connect_timeout)
        self.repository = open_repository(settings)
        local_dir = settings.data_dir / "pipeline" / "spark"
        local_dir.mkdir(parents=True, exist_ok=True)
        self.spark = build_session(
            master=settings.spark_master,
            remote=settings.spark_remote,
            local_dir=Path(local_dir).absolute(),
            driver_memory=settings.pipeline_driver_memory,
        )
        context = PipelineContext(
            settings=settings,
            spark=self.spark,
            connection=connection,
            repository=self.repository,
            lake=Lake(lake_root(settings)),
            checkpoints=checkpoint_root(settings),
            trigger_interval=settings.pipeline_trigger_interval,
            max_records_per_batch=settings.pipeline_max_records_per_batch,
            retention_interval=settings.pipeline_retention_interval,
        )
        for job_class in selected_jobs(settings):
            job: Job = job_class(context)
            job.start()
            self.jobs.append(job)
            log.info("pipeline: job %s started", job.name)
        if settings.spark_remote is None:  # stopped first, before the jobs whose work it watches
            heap = HeapRelease(context)
            heap.start()
            self.jobs.append(heap)

    def stop(self) -> None:
        for job in reversed(self.jobs):
            try:
                job.stop()
            except Exception:
                log.exception("pipeline: stopping job %s failed", job.name)
        self.jobs.clear()
        if self.spark is not None:
            self.spark.stop()
            self.spark = None
        if self.repository is not None:
            self.repository.close()
            self.repository = None
        if self.status is not None:
            self.status.stop()
            self.status = None


def run_pipeline(settings: Settings) -> None:
    """Runs the pipeline until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if settings.spark_remote is None:
        _without_pandas()
    pipeline = Pipeline(settings)
    try:
        pipeline.start()
        log.info("pipeline running (lake %s)", lake_root(settings))
        while not stop.wait(1.0):
            pass
        log.info("pipeline shutting down")
    finally:
        pipeline.stop()


def _without_pandas() -> None:
    """pyspark asks whether numpy is there by importing ``pyspark.testing``, which imports pandas and pyarrow:
    65 MiB of this process's 165. The jobs use neither on a classic session (Spark Connect's client does), so the
    pipeline process marks them absent, as if not installed."""
    for name in ("pandas", "pyarrow"):
        if name not in sys.modules:
            sys.modules[name] = None  # type: ignore[assignment]


def settings_environment(settings: Settings, bootstrap_servers: str) -> dict[str, str]:
    """``settings`` as HERMES_* variables (the environment, not argv, so secrets stay out of ``ps``)."""
    env: dict[str, str] = {}
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if isinstance(value, SecretStr):
            text = value.get_secret_value()
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env[ENV_PREFIX + name.upper()] = text
    env[ENV_PREFIX + "KAFKA_BOOTSTRAP_SERVERS"] = bootstrap_servers
    return env


class PipelineProcess:
    """``hermes pipeline`` as a child of ``hermes run``, so Spark's JVM and Python workers never compete with
    delivery for this process's GIL. It dies with its parent (``hermes.children``), like the embedded broker,
    and is started again when it exits on its own. Its output goes to ``logs/pipeline.log``."""

    def __init__(self, settings: Settings, bootstrap_servers: str) -> None:
        self._settings = settings
        self._env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)},
            **settings_environment(settings, bootstrap_servers),
        }
        self._log_path = settings.data_dir / "logs" / "pipeline.log"
        self._log: IO[bytes] | None = None
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        if self._log is None:
            self._log = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = spawn_tied(
            [sys.executable, "-m", "hermes", "pipeline"],
            env=self._env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.info("pipeline started (pid %d), logging to %s", self.process.pid, self._log_path)

    def exited(self) -> int | None:
        """The exit code when the child ended on its own, else None."""
        return None if self.process is None else self.process.poll()

    def stop(self, timeout: float = 30.0) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

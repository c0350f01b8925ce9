"""The pipeline as ``hermes run`` runs it: a child process (``hermes pipeline``, see
:mod:`hermes.pipeline.runner`), started again whenever it exits; ``status`` says how it is, for the banner."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import shutil
import time

from hermes.broker.embedded import ensure_port_free
from hermes.config import Settings
from hermes.logs import log_path
from hermes.pipeline.runner import PipelineProcess
from hermes.tasks import cancel

log = logging.getLogger(__name__)


class PipelineChild:
    def __init__(self, settings: Settings, bootstrap_servers: str) -> None:
        self._settings = settings
        self._bootstrap_servers = bootstrap_servers
        self._process: PipelineProcess | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.status = "not started"

    async def start(self) -> None:
        settings = self._settings
        if importlib.util.find_spec("pyspark") is None:
            self.status = "not started: pyspark is missing (install hermes-broker[spark])"
            log.warning("the pipeline is %s", self.status)
            return
        if not settings.spark_remote and not (os.environ.get("JAVA_HOME") or shutil.which("java")):
            self.status = "not started: local Spark needs Java (java on the PATH or JAVA_HOME)"
            log.warning("the pipeline is %s", self.status)
            return

        ensure_port_free(settings.host, settings.pipeline_port, "pipeline status")
        process = PipelineProcess(settings, self._bootstrap_servers)
        await asyncio.to_thread(process.start)
        self._process = process
        assert process.process is not None
        port = settings.pipeline_port  # 0: the child picks one, and its log says which
        status = f", status at http://{settings.host}:{port}" if port else ""
        pipeline_log = log_path(settings.data_dir, "pipeline").absolute()
        self.status = f"started (pid {process.process.pid}){status}, log {pipeline_log}"
        self._watcher = asyncio.create_task(self._watch(process), name="pipeline-watch")

    async def stop(self) -> None:
        await cancel(self._watcher)
        self._watcher = None
        if self._process is not None:
            await asyncio.to_thread(self._process.stop)
            self._process = None

    @staticmethod
    async def _watch(process: PipelineProcess) -> None:
        """Starts the pipeline again when it exits (it keeps its state in checkpoints), waiting longer after
        each exit that came soon after a start, up to a minute."""
        delay, started = 5.0, time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            code = process.exited()
            if code is None:
                continue
            delay = 5.0 if time.monotonic() - started > 120 else min(60.0, delay * 2)
            log.error("the pipeline exited with %s; starting it again in %.0f s (see logs/pipeline.log)", code, delay)
            await asyncio.sleep(delay)
            await asyncio.to_thread(process.start)
            started = time.monotonic()

"""Prometheus metrics of the pipeline process, served with ``/status/health`` on ``--pipeline-port``."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import Counter, Gauge

from hermes.http.edge import EdgeLimits
from hermes.http.server import Server
from hermes.http.status import ScrapeGuard, status_app
from hermes.tasks import NamedThread

ARCHIVE_RECORDS = Counter("hermes_pipeline_archive_records", "Kafka records written to the offline storage lake.")
ARCHIVE_BATCHES = Counter("hermes_pipeline_archive_batches", "Archive micro-batches committed.")
ARCHIVE_LAST_COMMIT = Gauge(
    "hermes_pipeline_archive_last_commit_timestamp_seconds", "When archived records were last seen committed."
)
ARCHIVE_RUNNING = Gauge("hermes_pipeline_archive_running", "1 while the archive query runs, 0 otherwise.")
ARCHIVED_TOPICS = Gauge("hermes_pipeline_archived_topics", "Topics with offline storage the archive reads.")


class StatusServer:
    """The status endpoints on an event loop of their own: the pipeline's work happens on threads."""

    def __init__(self, host: str, port: int, guard: ScrapeGuard | None, limits: EdgeLimits) -> None:
        self._server = Server(status_app(guard), host, port, "pipeline status", limits=limits)
        self._loop = asyncio.new_event_loop()
        self._thread = NamedThread(target=self._loop.run_forever, name="pipeline-status", daemon=True)

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> None:
        self._thread.start()
        self._call(self._server.start())

    def stop(self) -> None:
        try:
            self._call(self._server.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

"""The consumers role's entry point: the supervisor (one consumer per subscription), the producer of its trace
events and subscription events, when the role runs alone a server for health and Prometheus, and in distributed
mode the cluster node that tells the supervisor which subscriptions are this node's."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import TYPE_CHECKING

from hermes.broker.connection import KafkaConnection
from hermes.broker.producer import BrokerProducer
from hermes.config import Settings
from hermes.consumers.subscription_events import SubscriptionEvents
from hermes.consumers.supervisor import ConsumersSupervisor
from hermes.http.edge import EdgeLimits
from hermes.http.server import Server
from hermes.http.status import ScrapeGuard, status_app
from hermes.metadata.cache import MetadataCache
from hermes.metadata.repository import MetadataRepository
from hermes.telemetry import start_tracing
from hermes.tracker import Tracker

if TYPE_CHECKING:
    from hermes.cluster.node import ConsumersNode


class Consumers:
    """``serve_status``: alone in its process, the role serves ``/status/health`` and ``/status/prometheus``
    on ``--consumers-port`` itself."""

    def __init__(
        self,
        settings: Settings,
        connection: KafkaConnection,
        cache: MetadataCache,
        repository: MetadataRepository,
        *,
        serve_status: bool,
        node: ConsumersNode | None = None,
        tls: ssl.SSLContext | None = None,
        scrape_guard: ScrapeGuard | None = None,
    ) -> None:
        self._settings = settings
        self._connection = connection
        self._cache = cache
        self._repository = repository
        self._serve_status = serve_status
        self.node = node
        self._tls = tls
        self._scrape_guard = scrape_guard
        self._exit = contextlib.AsyncExitStack()
        self.supervisor: ConsumersSupervisor | None = None
        self.server: Server | None = None

    async def start(self) -> None:
        settings = self._settings
        tracking_producer = BrokerProducer(self._connection)
        self._exit.push_async_callback(asyncio.to_thread, tracking_producer.close, 2.0)
        tracker = Tracker(tracking_producer, settings.cluster_name)
        tracing = start_tracing(settings.tracing, "consumers")
        if tracing is not None:  # closed after the supervisor: the spans of its last deliveries go too
            self._exit.callback(tracing.close)
        node = self.node
        events = SubscriptionEvents(tracking_producer, settings.node_id, settings.cluster_name)
        self.supervisor = ConsumersSupervisor(
            settings, self._connection, self._cache, self._repository, tracker, tracing, events
        )
        if node is not None:
            self.supervisor.place(node.runs, node.rate_share)
        await self.supervisor.start()
        self._exit.push_async_callback(self.supervisor.stop)
        if self._serve_status:
            self.server = Server(
                status_app(self._scrape_guard),
                settings.host,
                settings.consumers_port,
                "consumers",
                self._tls,
                EdgeLimits.of(settings),
            )
            await self.server.start()
            self._exit.push_async_callback(self.server.stop)
        if node is not None:  # after the supervisor, so that the first assignment finds it
            await node.start(self.supervisor)
            self._exit.push_async_callback(node.stop)

    async def stop(self) -> None:
        await self._exit.aclose()

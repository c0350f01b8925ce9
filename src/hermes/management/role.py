"""The management role's entry point: the management API's service over the repository and the broker's
topics, served on ``--management-port``."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING

from hermes.broker.admin import BrokerAdmin
from hermes.broker.topics import KafkaTopics
from hermes.config import Settings
from hermes.errors import HermesError, MetadataUnavailable
from hermes.http.edge import EdgeLimits
from hermes.http.server import Server
from hermes.http.status import HEALTH, Health
from hermes.management.app import create_app
from hermes.management.services import ManagementService
from hermes.metadata.repository import MetadataRepository
from hermes.security.setup import Security
from hermes.ui import PREFIX
from hermes.ui.api import Upstream
from hermes.ui.app import create_app as create_console

if TYPE_CHECKING:
    from hermes.cluster.registry import ClusterStore

log = logging.getLogger(__name__)


class Management:
    """``cluster``: in distributed mode, the cluster's znodes, for ``/consumers/nodes`` and ``/frontends/nodes``."""

    def __init__(
        self,
        settings: Settings,
        repository: MetadataRepository,
        admin: BrokerAdmin,
        kafka_topics: KafkaTopics,
        security: Security,
        cluster: ClusterStore | None = None,
        tls: ssl.SSLContext | None = None,
        frontend_url: Callable[[], str] | None = None,
        health: Health | None = None,
    ) -> None:
        """``frontend_url``: the publishing API beside it in this process, for the console; ``health``: the
        process's, for ``/status/health``."""
        self._repository = repository
        self._service = ManagementService(settings, repository, admin, kafka_topics)
        app = create_app(self._service, security)
        if health is not None:
            app[HEALTH] = health
        if cluster is not None:
            from hermes.cluster.nodes_api import CLUSTER

            app[CLUSTER] = cluster
        self.server = Server(app, settings.host, settings.management_port, "management", tls, EdgeLimits.of(settings))
        if settings.ui:
            app.add_subapp(PREFIX, create_console(self._upstream(settings, frontend_url)))

    def _upstream(self, settings: Settings, frontend_url: Callable[[], str] | None) -> Upstream:
        """The console calls this server over loopback, and the publishing API beside it (or where it is told)."""
        scheme = "https" if settings.tls_cert_file is not None else "http"
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        frontend = (settings.ui_frontend_url or f"{scheme}://{host}:{settings.frontend_port}").rstrip("/")
        tls = None
        if settings.tls_cert_file is not None:
            tls = ssl.create_default_context()
            tls.load_verify_locations(settings.tls_cert_file)  # our own chain, beside the system's authorities
            tls.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
            tls.check_hostname = False  # it is our own listener, reached over loopback
        beside = settings.ui_frontend_url is None  # else a frontend elsewhere, checked as any other site

        def publishing() -> str:
            return frontend_url() if frontend_url is not None and beside else frontend

        return Upstream(lambda: f"{scheme}://{host}:{self.server.port}", publishing, tls, tls if beside else None)

    async def start(self) -> None:
        # secrets an earlier version stored in plain text, or under a key since rotated, are encrypted anew
        try:
            resealed = await asyncio.to_thread(self._repository.reseal_secrets)
        except MetadataUnavailable as exc:  # a key missing here: the API tells callers the same, per entity
            log.error("the stored secrets cannot be encrypted anew: %s", exc.message)
        else:
            if resealed:
                log.info("encrypted the stored secrets of %d subscriptions and OAuth providers anew", resealed)
        try:
            await self._service.create_subscription_events_topic()
        except HermesError as exc:  # the store or Kafka unreachable: created by a later start
            log.error("the topic of subscription events could not be created: %s", exc.message)
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

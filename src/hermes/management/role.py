"""The management role's entry point: the management API's service over the repository and the broker's
topics, served on ``--management-port``."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from hermes.broker.admin import BrokerAdmin
from hermes.broker.topics import KafkaTopics
from hermes.config import Settings
from hermes.http.edge import EdgeLimits
from hermes.http.server import Server
from hermes.management.app import create_app
from hermes.management.services import ManagementService
from hermes.metadata.repository import MetadataRepository
from hermes.security.setup import Security

if TYPE_CHECKING:
    from hermes.cluster.registry import ClusterStore


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
    ) -> None:
        app = create_app(ManagementService(settings, repository, admin, kafka_topics), security)
        if cluster is not None:
            from hermes.cluster.nodes_api import CLUSTER

            app[CLUSTER] = cluster
        self.server = Server(app, settings.host, settings.management_port, "management", tls, EdgeLimits.of(settings))

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

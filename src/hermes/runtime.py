"""Composing the roles of one process: the broker connection and metadata they share, then management,
consumers and frontend (each started by its package's entry point), and under ``hermes run`` the embedded
broker and the pipeline's child process. ``hermes run`` runs them all; the role subcommands run one each."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import logging
import os
import signal
import socket
import ssl
import tempfile
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from hermes.broker.admin import BrokerAdmin
from hermes.broker.child import BrokerChild
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker, ensure_port_free
from hermes.broker.embedded_security import BrokerSecurity
from hermes.broker.producer import BrokerProducer
from hermes.broker.topics import IDEMPOTENCY, OFFLOAD_DISCOVERY, TRACKING, KafkaTopics, TopicReconciler
from hermes.config import Settings, scram_users
from hermes.consumers.role import Consumers
from hermes.consumers.supervisor import ConsumersSupervisor
from hermes.datadir import DataDirLock, make_private
from hermes.errors import StartupError
from hermes.http.lean import LeanServer
from hermes.http.server import Server
from hermes.http.status import Health
from hermes.metadata.cache import MetadataCache
from hermes.metadata.factory import open_repository
from hermes.metadata.repository import MetadataRepository
from hermes.security.scrape import scrape_guard
from hermes.security.setup import Security
from hermes.security.tls import server_context

if TYPE_CHECKING:  # imported where started: a process imports only the roles it runs (kazoo, the zookeeper
    # extra's, only in distributed mode)
    from hermes.cluster.registry import ClusterStore
    from hermes.frontend.role import Frontend
    from hermes.management.role import Management
    from hermes.pipeline.role import PipelineChild

log = logging.getLogger(__name__)


class Role(StrEnum):
    MANAGEMENT = "management"
    FRONTEND = "frontend"
    CONSUMERS = "consumers"


ALL_ROLES = frozenset(Role)


def check_data_dir(settings: Settings) -> None:
    try:
        make_private(settings.data_dir)
        with tempfile.TemporaryFile(dir=settings.data_dir):
            pass
    except OSError as exc:
        raise StartupError(f"the data directory {settings.data_dir} is not writable: {exc.strerror}") from None


class RoleService(Protocol):
    """What runtime composes: each role's entry point in its own package."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Hermes:
    """The running system (or part of it) in this process: the broker connection and metadata the roles share,
    and the roles. A ``worker`` is one of the processes of ``hermes frontend --workers N``: its master holds
    the data directory's lock (shared with the workers) and the port, on which every worker listens
    (SO_REUSEPORT)."""

    def __init__(self, settings: Settings, roles: frozenset[Role] = ALL_ROLES, worker: bool = False) -> None:
        self.settings = settings
        self.roles = roles
        self.worker = worker
        self.broker: EmbeddedBroker | None = None
        self._broker_child: BrokerChild | None = None
        self.health = Health()  # what every port's /status/health reports down
        self.connection: KafkaConnection | None = None
        self.repository: MetadataRepository | None = None
        self.cache: MetadataCache | None = None
        self.management: Management | None = None
        self.consumers: Consumers | None = None
        self.frontend: Frontend | None = None
        self.pipeline: PipelineChild | None = None
        self._started: list[RoleService] = []  # the roles and the reconciler, in the order they started
        self._lock: DataDirLock | None = None
        self.security: Security | None = None
        self._cluster: ClusterStore | None = None
        self._admin: BrokerAdmin | None = None
        self._tls: ssl.SSLContext | None = None

    @property
    def name(self) -> str:
        """The command this process runs, as users know it."""
        return "hermes " + ("run" if self.roles == ALL_ROLES else "+".join(sorted(self.roles)))

    @property
    def servers(self) -> dict[Role, Server | LeanServer]:
        servers = {
            Role.MANAGEMENT: self.management.server if self.management else None,
            Role.FRONTEND: self.frontend.server if self.frontend else None,
            Role.CONSUMERS: self.consumers.server if self.consumers else None,
        }
        return {role: server for role, server in servers.items() if server is not None}

    @property
    def supervisor(self) -> ConsumersSupervisor | None:
        return self.consumers.supervisor if self.consumers else None

    @property
    def producer(self) -> BrokerProducer | None:
        """The frontend's producer."""
        return self.frontend.producer if self.frontend else None

    @property
    def pipeline_status(self) -> str:
        if self.pipeline is not None:
            return self.pipeline.status
        return "off (--no-pipeline)" if self.roles == ALL_ROLES else "not in this process"

    @property
    def scheme(self) -> str:
        return "https" if self.settings.tls_cert_file is not None else "http"

    def url(self, role: Role) -> str:
        return f"{self.scheme}://{self.settings.host}:{self.servers[role].port}"

    @property
    def frontend_url(self) -> str:
        return self.url(Role.FRONTEND)

    @property
    def management_url(self) -> str:
        return self.url(Role.MANAGEMENT)

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        settings = self.settings
        check_data_dir(settings)
        self.security = Security.from_settings(settings)
        self._tls = server_context(settings.tls_cert_file, settings.tls_key_file)
        for role in sorted(self.roles & {Role.MANAGEMENT, Role.FRONTEND, Role.CONSUMERS}):  # each has a port
            self.security.check_listener(settings.host, role.value)
        if Role.FRONTEND in self.roles and not self.worker:  # its journal (and hermes run's files) is its alone
            self._lock = DataDirLock.take(settings.data_dir, self.name)
            ensure_port_free(settings.host, settings.frontend_port, "frontend")
        if Role.MANAGEMENT in self.roles:
            ensure_port_free(settings.host, settings.management_port, "management")
        if self.roles == {Role.CONSUMERS}:
            ensure_port_free(settings.host, settings.consumers_port, "consumers")

        bootstrap = settings.kafka_bootstrap_servers
        if bootstrap is None and self.roles == ALL_ROLES:
            users = scram_users(settings)
            self.broker = EmbeddedBroker(
                settings.data_dir / "kafka",
                settings.embedded_broker_port,
                settings.host,
                settings.embedded_broker_heap_mb,
                BrokerSecurity(users) if users else None,
            )
            child = self._broker_child = BrokerChild(self.broker, settings.embedded_broker_restart_backoff)
            await child.start()
            self.health.add(lambda: child.problem)
            bootstrap = self.broker.bootstrap_servers
        bootstrap = bootstrap or self._running_embedded_broker()
        if self.broker is not None and self.broker.security is not None:  # Hermes signs in as the broker's user
            self.connection = KafkaConnection(bootstrap, tuple(sorted(self.broker.client_config().items())))
        else:
            self.connection = KafkaConnection.from_settings(settings, bootstrap)
        admin = self._admin = BrokerAdmin(self.connection, settings.kafka_admin_timeout)  # the roles'
        await asyncio.to_thread(admin.wait_until_reachable, settings.kafka_connect_timeout)

        self.repository = await asyncio.to_thread(open_repository, settings)
        kafka_topics = KafkaTopics(admin, settings.topic_partitions)
        # the tracking topic, created before any role writes to it; the discovery topic where a frontend advertises,
        # and the one of idempotency keys it reads at start
        internal = [TRACKING, OFFLOAD_DISCOVERY, IDEMPOTENCY] if Role.FRONTEND in self.roles else [TRACKING]
        reconciler = TopicReconciler(
            kafka_topics, self.repository.list_topics, settings.topic_reconcile_interval, internal
        )
        await self._start_role(reconciler)
        if self.roles == ALL_ROLES and settings.pipeline:
            from hermes.pipeline.role import PipelineChild

            self.pipeline = PipelineChild(settings, bootstrap)
            await self._start_role(self.pipeline)
        if Role.FRONTEND in self.roles or Role.CONSUMERS in self.roles:
            self.cache = MetadataCache(self.repository)
            await self.cache.start()

        if Role.MANAGEMENT in self.roles:
            from hermes.management.role import Management

            cluster = self._cluster_store() if self._distributed else None
            beside = (lambda: self.frontend_url) if Role.FRONTEND in self.roles else None
            self.management = Management(
                settings, self.repository, admin, kafka_topics, self.security, cluster, self._tls, beside, self.health
            )
            await self._start_role(self.management)

        if Role.CONSUMERS in self.roles:
            assert self.cache is not None
            alone = not self.roles & {Role.FRONTEND, Role.MANAGEMENT}  # then it serves health and Prometheus
            node = None
            if self._distributed:
                from hermes.cluster.members import consumers_node

                node = consumers_node(
                    settings, self._cluster_store(), self.repository, self.cache, self._member_address
                )
            self.consumers = Consumers(
                settings,
                self.connection,
                self.cache,
                self.repository,
                serve_status=alone,
                node=node,
                tls=self._tls,
                scrape_guard=scrape_guard(self.security),
            )
            await self._start_role(self.consumers)
            assert self.consumers.supervisor is not None
            reconciler.on_recreated(self.consumers.supervisor.topic_recreated)

        if Role.FRONTEND in self.roles:
            from hermes.frontend.role import Frontend

            assert self.cache is not None
            assert self.security is not None
            self.frontend = Frontend(
                settings,
                self.connection,
                admin,
                self.repository,
                self.cache,
                self.security,
                self._cluster_store() if self._distributed else None,
                worker=self.worker,
                tls=self._tls,
                health=self.health,
            )
            await self._start_role(self.frontend)
            reconciler.on_recreated(self.frontend.topic_recreated)

    async def _start_role(self, role: RoleService) -> None:
        self._started.append(role)  # stopped even when its start fails half-way
        await role.start()

    @property
    def _distributed(self) -> bool:
        """Distributed mode: the metadata store is ZooKeeper (docs/cluster.md). SQLite is one machine's."""
        return self.settings.metadata_store == "zookeeper"

    def _cluster_store(self) -> ClusterStore:
        """One connection to the cluster's znodes for the roles of this process, closed when it stops."""
        if self._cluster is None:
            from hermes.cluster.members import open_store

            self._cluster = open_store(self.settings)
        return self._cluster

    def _member_address(self) -> str:
        """Where this consumers node answers health and metrics: its own server or the process's other one."""
        role = next((r for r in (Role.CONSUMERS, Role.MANAGEMENT) if r in self.servers), None)
        port = f":{self.servers[role].port}" if role is not None else ""
        return f"http://{self.settings.host}{port}"

    def _running_embedded_broker(self) -> str:
        """A role started alone, without --kafka-bootstrap-servers, uses the broker a `hermes run` started."""
        host, port = self.settings.host, self.settings.embedded_broker_port
        address = f"{host}:{port}"
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            raise StartupError(
                f"no Kafka broker at {address}: start `hermes run` first (its embedded broker listens there), "
                "or give --kafka-bootstrap-servers"
            ) from None
        return address

    async def stop(self) -> None:
        """Stops in reverse order of start: first stop accepting, then drain, then the broker."""
        for role in reversed(self._started):
            try:
                await role.stop()
            except Exception:
                log.exception("error while stopping")
        self._started.clear()
        if self._admin is not None:  # in a thread: its destroy waits for a call a stopped role left running
            await asyncio.to_thread(self._admin.close)
            self._admin = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self.cache is not None:
            await self.cache.stop()
            self.cache = None
        if self.repository is not None:
            self.repository.close()
            self.repository = None
        if self._broker_child is not None:
            await self._broker_child.stop()
            self._broker_child = None
            self.broker = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None


async def serve(settings: Settings, roles: frozenset[Role], worker: bool = False) -> None:
    """Runs until SIGINT or SIGTERM, then shuts everything down cleanly. A frontend ``worker`` also stops when
    its master goes away (its standard input, a pipe from the master, ends); it tells the master it is ready
    on its standard output instead of logging the banner."""
    hermes = Hermes(settings, roles, worker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # kill -USR1 writes every thread's stack to standard error: where a process that does not stop is stuck
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if worker:

        def master_gone() -> None:
            if not os.read(0, 4096):
                stop.set()

        loop.add_reader(0, master_gone)
    try:
        await hermes.start()
        # What start-up built lives as long as the process. Frozen, it is left out of the collector's full
        # collections: each took 15-17 ms with the frontend's ~60,000 objects (a pause every request in flight
        # waits out), about 0 after.
        gc.collect()
        gc.freeze()
        if worker:
            os.write(1, b"ready\n")
        else:
            from hermes.banner import banner  # it reads this module's Hermes

            log.info(banner(hermes))
        await stop.wait()
        log.info("shutting down")
    finally:
        with contextlib.suppress(asyncio.CancelledError):
            await hermes.stop()

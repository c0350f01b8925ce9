"""Starting and stopping the roles of one process: broker connection, metadata, management, frontend and
consumers. ``hermes run`` runs them all; the role subcommands run one each."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import shutil
import signal
import socket
import ssl
import tempfile
import time
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.embedded import EmbeddedBroker, ensure_port_free
from hermes.broker.producer import BrokerProducer
from hermes.broker.topics import KafkaTopics, TopicReconciler
from hermes.config import Settings
from hermes.consumers.supervisor import ConsumersSupervisor
from hermes.datadir import DataDirLock
from hermes.domain.topic import Topic
from hermes.domain.trace import TRACKING_TOPIC
from hermes.errors import StartupError
from hermes.http.lean import DEFAULT_MAX_BODY, LeanServer
from hermes.http.server import Server
from hermes.logs import log_path
from hermes.metadata.cache import MetadataCache
from hermes.metadata.documents import TOPIC_METRICS
from hermes.metadata.factory import open_repository
from hermes.metadata.repository import MetadataRepository
from hermes.offload.api import UPLOAD_HEADROOM, OffloadApi
from hermes.offload.blobs import BlobStore
from hermes.offload.discovery import advertise_at_start
from hermes.offload.local import LocalBlobStore
from hermes.offload.offloader import Offloader
from hermes.offload.retention import BlobRetention
from hermes.security.setup import Security
from hermes.security.tls import server_context
from hermes.tracker import Tracker

if TYPE_CHECKING:  # kazoo is the zookeeper extra's: imported only in distributed mode
    from hermes.cluster.registry import ClusterStore

log = logging.getLogger(__name__)


class Role(StrEnum):
    MANAGEMENT = "management"
    FRONTEND = "frontend"
    CONSUMERS = "consumers"


ALL_ROLES = frozenset(Role)


def check_data_dir(settings: Settings) -> None:
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=settings.data_dir):
            pass
    except OSError as exc:
        raise StartupError(f"the data directory {settings.data_dir} is not writable: {exc.strerror}") from None


class Hermes:
    """The running system (or part of it) in this process. A ``worker`` is one of the processes of ``hermes
    frontend --workers N``: its master holds the data directory's lock (shared with the workers) and the port,
    on which every worker listens (SO_REUSEPORT)."""

    def __init__(self, settings: Settings, roles: frozenset[Role] = ALL_ROLES, worker: bool = False) -> None:
        self.settings = settings
        self.roles = roles
        self.worker = worker
        self.broker: EmbeddedBroker | None = None
        self.connection: KafkaConnection | None = None
        self.repository: MetadataRepository | None = None
        self.cache: MetadataCache | None = None
        self.producer: BrokerProducer | None = None
        self.servers: dict[Role, Server | LeanServer] = {}
        self.supervisor: ConsumersSupervisor | None = None
        self.tracking_producer: BrokerProducer | None = None
        self._stoppers: list[Any] = []
        self._closers: list[Any] = []  # synchronous, after the producer flushed
        self._lock: DataDirLock | None = None
        self.pipeline_status = "not in this process"
        self.security: Security | None = None
        self._cluster: ClusterStore | None = None
        self._tls: ssl.SSLContext | None = None

    @property
    def name(self) -> str:
        """The command this process runs, as users know it."""
        return "hermes " + ("run" if self.roles == ALL_ROLES else "+".join(sorted(self.roles)))

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
        for role in sorted(self.roles & {Role.MANAGEMENT, Role.FRONTEND}):
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
            self.broker = EmbeddedBroker(
                settings.data_dir / "kafka",
                settings.embedded_broker_port,
                settings.host,
                settings.embedded_broker_heap_mb,
            )
            self.broker.launch()  # from this thread: the broker dies with the thread that started it
            await asyncio.to_thread(self.broker.wait_until_ready)
            bootstrap = self.broker.bootstrap_servers
        bootstrap = bootstrap or self._running_embedded_broker()
        self.connection = KafkaConnection.from_settings(settings, bootstrap)
        admin = BrokerAdmin(self.connection)
        await asyncio.to_thread(admin.wait_until_reachable, settings.kafka_connect_timeout)
        if not await asyncio.to_thread(admin.topic_exists, TRACKING_TOPIC):
            await asyncio.to_thread(admin.create_topic, TRACKING_TOPIC, settings.topic_partitions)

        self.repository = await asyncio.to_thread(open_repository, settings)
        kafka_topics = KafkaTopics(admin, settings.topic_partitions)
        reconciler = TopicReconciler(kafka_topics, self.repository.list_topics, settings.topic_reconcile_interval)
        await reconciler.start()
        self._stoppers.append(reconciler.stop)
        if self.roles == ALL_ROLES and settings.pipeline:
            await self._start_pipeline(bootstrap)
        elif self.roles == ALL_ROLES:
            self.pipeline_status = "off (--no-pipeline)"
        if Role.FRONTEND in self.roles or Role.CONSUMERS in self.roles:
            self.cache = MetadataCache(self.repository)
            await self.cache.start()

        if Role.MANAGEMENT in self.roles:
            from hermes.management.app import create_app as management_app
            from hermes.management.services import ManagementService

            service = ManagementService(settings, self.repository, admin)
            app = management_app(service, self.security)
            if self._distributed:
                from hermes.cluster.nodes_api import CLUSTER

                app[CLUSTER] = self._cluster_store()
            await self._serve(Role.MANAGEMENT, app, settings.management_port)

        if Role.CONSUMERS in self.roles:
            assert self.cache is not None
            self.tracking_producer = BrokerProducer(self.connection)
            tracker = Tracker(self.tracking_producer, settings.cluster_name)
            node = None
            if self._distributed:
                from hermes.cluster.members import consumers_node

                node = consumers_node(settings, self._cluster_store(), self.repository, self._member_address())
            self.supervisor = ConsumersSupervisor(
                settings, self.connection, self.cache, self.repository, tracker, *([node.runs] if node else [])
            )
            await self.supervisor.start()
            reconciler.on_recreated(self.supervisor.topic_recreated)
            self._stoppers.append(self.supervisor.stop)
            if not self.roles & {Role.FRONTEND, Role.MANAGEMENT}:  # alone: serve health and Prometheus itself
                from hermes.http.status import status_app

                await self._serve(Role.CONSUMERS, status_app(), settings.consumers_port)
            if node is not None:  # after the supervisor, so that the first assignment finds it
                await node.start(self.supervisor)
                self._stoppers.append(node.stop)

        if Role.FRONTEND in self.roles:
            from hermes.frontend.access import PublishAccess
            from hermes.frontend.app import PublishingApi, TopicLookup
            from hermes.frontend.journal import Journal
            from hermes.frontend.publish_metrics import JOURNAL_BYTES, JOURNAL_MESSAGES, PublishedCounter, SharedMetrics
            from hermes.frontend.publishing import Publisher, PublishTimeouts
            from hermes.frontend.readiness import Readiness
            from hermes.frontend.schemas import SchemaSource

            assert self.cache is not None
            self.producer = producer = BrokerProducer(self.connection)
            await asyncio.to_thread(producer.warm)
            loop = asyncio.get_running_loop()

            def warm(name: str, topic: Topic | None) -> None:
                if topic is not None:
                    loop.run_in_executor(None, producer.warm, name)

            self.cache.on_topic_change(warm)
            journal = Journal(
                settings.data_dir / "journal",
                settings.frontend_journal_max_bytes,
                settings.frontend_journal_fsync,
                settings.frontend_journal_fsync_interval,
            )
            pending = await asyncio.to_thread(journal.recover)
            JOURNAL_MESSAGES.set_function(lambda: journal.depth)
            JOURNAL_BYTES.set_function(lambda: journal.pending_bytes)
            self._closers.append(journal.close)
            store = await self._start_blob_store()
            offloader = Offloader(store, settings.offload_max_message_size)
            publisher = Publisher(
                self.producer,
                PublishTimeouts(settings.frontend_ack_leader_timeout / 1000, settings.frontend_ack_all_timeout / 1000),
                SchemaSource(self.repository, self.cache),
                Tracker(self.producer, settings.cluster_name),
                frozenset(h.strip() for h in settings.frontend_propagated_headers.split(",") if h.strip()),
                journal,
                offloader,
            )
            for entry in pending:
                publisher.resend(entry)
            published = PublishedCounter()
            readiness = Readiness(producer)
            await readiness.start()
            self._stoppers.append(readiness.stop)
            assert self.security is not None
            access = PublishAccess(self.security.authenticator, settings.publish_authentication == "required")
            offload = OffloadApi(store, self.cache, TopicLookup(self.cache), settings.offload_max_message_size)
            if self.worker and SharedMetrics.enabled():
                shared = SharedMetrics(journal)
                api = PublishingApi(
                    publisher, self.cache, published, readiness, access, shared.exposition, offload=offload
                )
                sharing = asyncio.create_task(shared.run(), name="shared-metrics")
                self._stoppers.append(lambda: _cancel(sharing))
            else:
                api = PublishingApi(publisher, self.cache, published, readiness, access, offload=offload)
            server = LeanServer(
                api,
                settings.host,
                settings.frontend_port,
                Role.FRONTEND.value,
                max_body=max(DEFAULT_MAX_BODY, settings.offload_max_message_size + UPLOAD_HEADROOM),
                reuse_port=self.worker,
                tls=self._tls,
            )
            await server.start()
            self.servers[Role.FRONTEND] = server
            self._stoppers.append(server.stop)
            offloader.endpoint = settings.offload_advertised_url or f"{self.frontend_url}/offload"
            advertiser = await advertise_at_start(admin, producer, offloader.endpoint)
            if advertiser is not None:
                self._stoppers.append(lambda: _cancel(advertiser))
            reporter = asyncio.create_task(self._report_published(published), name="published-metrics")
            self._stoppers.append(lambda: _cancel(reporter))
            if self._distributed:
                from hermes.cluster.members import FrontendMember

                member = FrontendMember(self._cluster_store(), self.frontend_url, settings.cluster_report_interval)
                await member.start()
                self._stoppers.append(member.stop)

    @property
    def _distributed(self) -> bool:
        """Distributed mode: the metadata store is ZooKeeper (docs/cluster.md). SQLite is one machine's."""
        return self.settings.metadata_store == "zookeeper"

    def _cluster_store(self) -> ClusterStore:
        """One connection to the cluster's znodes for the roles of this process, closed when it stops."""
        if self._cluster is None:
            from hermes.cluster.members import open_store

            self._cluster = store = open_store(self.settings)
            self._closers.append(store.close)
        return self._cluster

    def _member_address(self) -> str:
        """Where this consumers node answers health and metrics: its own server or the process's other one."""
        role = next((r for r in (Role.CONSUMERS, Role.MANAGEMENT) if r in self.servers), None)
        port = f":{self.servers[role].port}" if role is not None else ""
        return f"http://{self.settings.host}{port}"

    async def _start_blob_store(self) -> BlobStore:
        """The store of large messages, and their retention."""
        assert self.cache is not None
        settings = self.settings
        store: BlobStore
        if settings.offload_store == "s3":
            from hermes.offload.s3 import S3BlobStore

            if not settings.offload_s3_bucket:
                raise StartupError("--offload-store s3 needs --offload-s3-bucket")
            store = S3BlobStore(
                settings.offload_s3_bucket,
                settings.offload_s3_prefix,
                settings.offload_s3_endpoint_url,
                settings.offload_s3_region,
            )
        else:
            store = await asyncio.to_thread(LocalBlobStore, settings.data_dir / "offload")
        retention = BlobRetention(store, self.cache, settings.offload_expiry_interval)
        await retention.start()
        self._stoppers.append(retention.stop)
        return store

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

    async def _start_pipeline(self, bootstrap: str) -> None:
        import importlib.util

        from hermes.pipeline.runner import PipelineProcess

        if importlib.util.find_spec("pyspark") is None:
            self.pipeline_status = "not started: pyspark is missing (install hermes-broker[spark])"
            log.warning("the pipeline is %s", self.pipeline_status)
            return
        if not self.settings.spark_remote and not (os.environ.get("JAVA_HOME") or shutil.which("java")):
            self.pipeline_status = "not started: local Spark needs Java (java on the PATH or JAVA_HOME)"
            log.warning("the pipeline is %s", self.pipeline_status)
            return

        ensure_port_free(self.settings.host, self.settings.pipeline_port, "pipeline status")
        pipeline = PipelineProcess(self.settings, bootstrap)
        await asyncio.to_thread(pipeline.start)
        assert pipeline.process is not None
        port = self.settings.pipeline_port  # 0: the child picks one, and its log says which
        status = f", status at http://{self.settings.host}:{port}" if port else ""
        pipeline_log = log_path(self.settings.data_dir, "pipeline").absolute()
        self.pipeline_status = f"started (pid {pipeline.process.pid}){status}, log {pipeline_log}"
        watcher = asyncio.create_task(self._watch_pipeline(pipeline), name="pipeline-watch")

        async def stop() -> None:
            await _cancel(watcher)
            await asyncio.to_thread(pipeline.stop)

        self._stoppers.append(stop)

    @staticmethod
    async def _watch_pipeline(pipeline: Any) -> None:
        """Starts the pipeline again when it exits (it keeps its state in checkpoints), waiting longer after
        each exit that came soon after a start, up to a minute."""
        delay, started = 5.0, time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            code = pipeline.exited()
            if code is None:
                continue
            delay = 5.0 if time.monotonic() - started > 120 else min(60.0, delay * 2)
            log.error("the pipeline exited with %s; starting it again in %.0f s (see logs/pipeline.log)", code, delay)
            await asyncio.sleep(delay)
            await asyncio.to_thread(pipeline.start)
            started = time.monotonic()

    async def _report_published(self, published: Any) -> None:
        assert self.repository is not None
        while True:
            await asyncio.sleep(self.settings.consumer_metrics_interval)
            for topic, snapshot in published.snapshots().items():
                key = f"{topic}/{self.settings.node_id}"
                try:
                    await asyncio.to_thread(self.repository.put_document, TOPIC_METRICS, key, snapshot)
                except Exception:
                    log.warning("reporting publish metrics failed", exc_info=True)

    async def _serve(self, role: Role, app: Any, port: int) -> None:
        server = Server(app, self.settings.host, port, role.value, self._tls)
        await server.start()
        self.servers[role] = server
        self._stoppers.append(server.stop)

    async def stop(self) -> None:
        """Stops in reverse order of start: first stop accepting, then drain, then the broker."""
        for stop in reversed(self._stoppers):
            try:
                await stop()
            except Exception:
                log.exception("error while stopping")
        self._stoppers.clear()
        if self.tracking_producer is not None:
            await asyncio.to_thread(self.tracking_producer.close, 2.0)
            self.tracking_producer = None
        if self.producer is not None:
            unacked = await asyncio.to_thread(self.producer.close, 10.0)
            if unacked:
                log.warning("%d published messages were not acknowledged by the broker at shutdown", unacked)
            self.producer = None
        for close in self._closers:
            close()
        self._closers.clear()
        if self.cache is not None:
            await self.cache.stop()
            self.cache = None
        if self.repository is not None:
            self.repository.close()
            self.repository = None
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)
            self.broker = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def serve(settings: Settings, roles: frozenset[Role], worker: bool = False) -> None:
    """Runs until SIGINT or SIGTERM, then shuts everything down cleanly. A frontend ``worker`` also stops when
    its master goes away (its standard input, a pipe from the master, ends); it tells the master it is ready
    on its standard output instead of logging the banner."""
    hermes = Hermes(settings, roles, worker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
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

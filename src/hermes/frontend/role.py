"""The frontend role's entry point: the producer, the journal (with the messages a previous run left in it),
the publisher, publishers' access, the readiness check, the offload service of large messages (on the same
port), the publishing server, the per-topic publish counts it reports, and in distributed mode its registration
as a cluster member."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.broker.producer import BrokerProducer
from hermes.config import Settings, scram_users
from hermes.domain.topic import Topic
from hermes.errors import MetadataUnreachable, StartupError
from hermes.frontend.access import PublishAccess
from hermes.frontend.app import PublishingApi, TopicLookup
from hermes.frontend.idempotency import IdempotencyKeys
from hermes.frontend.journal import Journal
from hermes.frontend.publish_metrics import JOURNAL_BYTES, JOURNAL_MESSAGES, PublishedCounter, SharedMetrics
from hermes.frontend.publishing import Publisher, PublishTimeouts
from hermes.frontend.readiness import Readiness
from hermes.frontend.schemas import SchemaSource
from hermes.http.edge import EdgeLimits
from hermes.http.lean import DEFAULT_MAX_BODY, LeanServer
from hermes.http.status import Health
from hermes.metadata.cache import MetadataCache
from hermes.metadata.documents import TOPIC_METRICS
from hermes.metadata.repository import MetadataRepository
from hermes.offload.api import UPLOAD_HEADROOM, OffloadApi
from hermes.offload.blobs import BlobStore
from hermes.offload.discovery import METADATA_TOPIC, advertise_at_start
from hermes.offload.local import PARTIAL, LocalBlobStore
from hermes.offload.offloader import Offloader
from hermes.offload.retention import BlobRetention
from hermes.offload.scram import MECHANISM as SCRAM_MECHANISM
from hermes.offload.scram import HttpScram
from hermes.security.setup import Security
from hermes.tasks import cancel
from hermes.telemetry import start_tracing
from hermes.tracker import Tracker

if TYPE_CHECKING:
    from hermes.cluster.members import FrontendMember
    from hermes.cluster.registry import ClusterStore

log = logging.getLogger(__name__)


class Frontend:
    """``worker``: one of the processes of ``hermes frontend --workers N``, all listening on one port and serving
    every worker's metrics. ``cluster``: the cluster's znodes, in distributed mode. ``health``: the process's,
    for ``/status/health``."""

    def __init__(
        self,
        settings: Settings,
        connection: KafkaConnection,
        admin: BrokerAdmin,
        repository: MetadataRepository,
        cache: MetadataCache,
        security: Security,
        cluster: ClusterStore | None = None,
        *,
        worker: bool = False,
        tls: ssl.SSLContext | None = None,
        health: Health | None = None,
    ) -> None:
        self._settings = settings
        self._connection = connection
        self._admin = admin
        self._repository = repository
        self._cache = cache
        self._security = security
        self._cluster = cluster
        self._worker = worker
        self._tls = tls
        self._health = health
        self._exit = contextlib.AsyncExitStack()
        self.producer: BrokerProducer | None = None
        self.server: LeanServer | None = None
        self.idempotency: IdempotencyKeys | None = None
        self._offload_endpoint: str | None = None  # advertised in sys.metadata once the frontend listens
        self._readiness: Readiness | None = None
        self._member: FrontendMember | None = None

    async def start(self) -> None:
        settings = self._settings
        tracing = start_tracing(settings.tracing, "frontend")
        if tracing is not None:  # closed last: the spans of the server's and the producer's last work go too
            self._exit.callback(tracing.close)
        journal = Journal(
            settings.data_dir / "journal",
            settings.frontend_journal_max_bytes,
            settings.frontend_journal_fsync,
            settings.frontend_journal_fsync_interval,
        )
        self._exit.callback(journal.close)  # after the producer flushed: its last acks settle journaled messages
        self.producer = producer = BrokerProducer(self._connection)
        self._exit.push_async_callback(self._close_producer, producer)
        await asyncio.to_thread(producer.warm)
        loop = asyncio.get_running_loop()

        def warm(name: str, topic: Topic | None) -> None:
            if topic is not None:
                loop.run_in_executor(None, producer.warm, name)

        self._cache.on_topic_change(warm)
        pending = await asyncio.to_thread(journal.recover)
        JOURNAL_MESSAGES.set_function(lambda: journal.depth)
        JOURNAL_BYTES.set_function(lambda: journal.pending_bytes)
        store = await self._start_blob_store()
        self.idempotency = idempotency = IdempotencyKeys(producer, self._connection, self._admin)
        await idempotency.start()  # the keys known before, before the first publish
        self._exit.push_async_callback(idempotency.stop)
        offloader = Offloader(store, settings.offload_max_message_size)
        publisher = Publisher(
            producer,
            PublishTimeouts(settings.frontend_ack_leader_timeout / 1000, settings.frontend_ack_all_timeout / 1000),
            SchemaSource(self._repository, self._cache),
            Tracker(producer, settings.cluster_name),
            frozenset(h.strip() for h in settings.frontend_propagated_headers.split(",") if h.strip()),
            journal,
            offloader,
            idempotency,
            tracing,
        )
        for entry in pending:
            publisher.resend(entry)
        published = PublishedCounter()
        self._readiness = readiness = Readiness(producer, health=self._health)
        await readiness.start()
        self._exit.push_async_callback(readiness.stop)
        access = PublishAccess(self._security.authenticator, settings.publish_authentication == "required")
        offload = OffloadApi(
            store,
            self._cache,
            TopicLookup(self._cache),
            settings.offload_max_message_size,
            access,
            self._offload_scram(),
        )
        if self._worker and SharedMetrics.enabled():
            shared = SharedMetrics(journal)
            api = PublishingApi(
                publisher, self._cache, published, readiness, access, shared.exposition, offload, tracing
            )
            sharing = asyncio.create_task(shared.run(), name="shared-metrics")
            self._exit.push_async_callback(cancel, sharing)
        else:
            api = PublishingApi(publisher, self._cache, published, readiness, access, offload=offload, tracing=tracing)
        self.server = LeanServer(
            api,
            settings.host,
            settings.frontend_port,
            "frontend",
            max_body=max(DEFAULT_MAX_BODY, settings.offload_max_message_size + UPLOAD_HEADROOM),
            limits=EdgeLimits.of(settings),
            reuse_port=self._worker,
            tls=self._tls,
            spool_dir=await asyncio.to_thread(_spool_dir, settings.data_dir),
        )
        await self.server.start()
        self._exit.push_async_callback(self.server.stop)
        url = f"{'https' if self._tls else 'http'}://{settings.host}:{self.server.port}"
        offloader.endpoint = settings.offload_advertised_url or f"{url}/offload"  # in the placeholders' URLs
        self._offload_endpoint = offloader.endpoint
        await self._advertise()
        reporter = asyncio.create_task(self._report_published(published), name="published-metrics")
        self._exit.push_async_callback(cancel, reporter)
        if self._cluster is not None:
            from hermes.cluster.members import FrontendMember

            self._member = FrontendMember(self._cluster, url, settings.cluster_report_interval)
            await self._member.start()

    def _offload_scram(self) -> HttpScram | None:
        """HTTP SCRAM for the offload service when Kafka has SCRAM users: theirs, and Hermes' own Kafka user when
        its password is known here (the consumers fetch offloaded messages with it)."""
        users = scram_users(self._settings)
        if not users:
            return None
        own = dict(self._connection.security)
        if own.get("sasl.mechanism") == SCRAM_MECHANISM and "sasl.password" in own:
            users[own["sasl.username"]] = own["sasl.password"]
        return HttpScram(users)

    async def _start_blob_store(self) -> BlobStore:
        """The store of large messages, and their retention."""
        settings = self._settings
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
        retention = BlobRetention(store, self._cache, settings.offload_expiry_interval)
        await retention.start()
        self._exit.push_async_callback(retention.stop)
        return store

    async def _advertise(self) -> None:
        assert self.producer is not None and self._offload_endpoint is not None
        advertiser = await advertise_at_start(self._admin, self.producer, self._offload_endpoint)
        if advertiser is not None:
            self._exit.push_async_callback(cancel, advertiser)

    async def topic_recreated(self, topic: str) -> None:
        """The reconciliation created ``topic`` again after a Kafka admin deleted it: an empty discovery topic
        advertises nothing, so the offload service is advertised anew."""
        if topic == METADATA_TOPIC and self._offload_endpoint is not None:
            await self._advertise()

    async def stop(self) -> None:
        """Says it is going (/status/ready answers 503, it leaves the cluster, answers close their connections),
        publishes on for ``--frontend-shutdown-wait`` seconds, stops accepting, answers what it is publishing,
        flushes the producer, closes the journal."""
        self._offload_endpoint = None  # no more advertising
        if self._readiness is not None:
            await self._readiness.stop()
        if self.server is not None:
            self.server.drain()
        if self._member is not None:
            await self._member.stop()
            self._member = None
        if self.server is not None and self._settings.frontend_shutdown_wait:
            await asyncio.sleep(self._settings.frontend_shutdown_wait)
        await self._exit.aclose()

    @staticmethod
    async def _close_producer(producer: BrokerProducer) -> None:
        unacked = await asyncio.to_thread(producer.close, 10.0)
        if unacked:
            log.warning("%d published messages were not acknowledged by the broker at shutdown", unacked)

    async def _report_published(self, published: PublishedCounter) -> None:
        while True:
            await asyncio.sleep(self._settings.consumer_metrics_interval)
            for topic, snapshot in published.snapshots().items():
                key = f"{topic}/{self._settings.node_id}"
                try:
                    await asyncio.to_thread(self._repository.put_document, TOPIC_METRICS, key, snapshot)
                except MetadataUnreachable as exc:
                    log.warning("reporting publish metrics failed: %s", exc.message)
                except Exception:
                    log.warning("reporting publish metrics failed", exc_info=True)


def _spool_dir(data_dir: Path) -> Path:
    """Where large request bodies are written as they arrive: beside the local blob store's partial blobs (whose
    store removes the files of dead processes), on the same file system as the blobs."""
    spool = data_dir / "offload" / PARTIAL
    spool.mkdir(parents=True, exist_ok=True)
    return spool

"""Runs one consumer per active subscription placed on this node, following the metadata cache's notifications (of
subscriptions, and of retransmission requests, which go to the subscription's consumer). One process runs every
subscription; in a cluster (hermes.cluster) ``place`` says which are this node's, and ``replace`` follows
its changes.

A consumer that crashes is stopped (what it finished is committed, the rest comes again) and started anew after
a backoff that doubles with each crash in a row, up to ``consumer_restart_backoff_max``; the other consumers are
not touched. A consumer that ran ten times that cap since its restart before crashing again counts from one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp

from hermes.broker.admin import BrokerAdmin
from hermes.broker.connection import KafkaConnection
from hermes.config import Settings
from hermes.consumers.body_budget import BodyBudget
from hermes.consumers.content import ContentConverter
from hermes.consumers.context import ConsumerContext, CrashListener
from hermes.consumers.dead_letters import DeadLetters
from hermes.consumers.offloaded import OffloadedMessages
from hermes.consumers.parking import ParkingLot
from hermes.consumers.process import ConsumerProcess
from hermes.consumers.rate import RateSettings
from hermes.consumers.resolver import load_resolver
from hermes.consumers.sender.http import HttpSender
from hermes.consumers.sender.oauth import OAuthTokens, TokenClient
from hermes.consumers.sender.senders import MessageSenders
from hermes.consumers.shared_reading import SharedReader
from hermes.consumers.subscription_events import SubscriptionEvents
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription, SubscriptionState
from hermes.errors import HermesError, MetadataUnreachable
from hermes.metadata.cache import MetadataCache
from hermes.metadata.documents import DEAD_LETTER_REDRIVES, RETRANSMISSION, SUBSCRIPTION_METRICS
from hermes.metadata.repository import MetadataRepository, until_reachable
from hermes.security.tls import client_context
from hermes.tasks import cancel
from hermes.tracker import Tracker

if TYPE_CHECKING:  # imported only when tracing is on: the extra's package
    from hermes.telemetry.spans import Tracing

log = logging.getLogger(__name__)

# Metrics snapshots taken in one turn of the event loop: a thousand busy subscriptions' took about 25 ms in one go (a
# twentieth of the process's CPU at 2 msg/s each), a pause of every delivery once a second.
_REPORTS_PER_TURN = 50
# Seconds without a consumer started or stopped before the process's objects are frozen again (see _freeze).
_FREEZE_AFTER = 5.0
# Objects allocated (less those freed) between young collections; Python's 700 made one every 7 ms at a thousand
# subscriptions x 2 msg/s, so whatever a delivery kept for a few milliseconds survived two of them into the old
# generation, and its growth set off a full collection every second (a fifth of the process's CPU: docs/benchmarks.md,
# "The collector and the snapshots at a thousand subscriptions"). Ten times that: a tenth as many.
_YOUNG_COLLECTION_EVERY = 7_000


class ConsumersSupervisor:
    def __init__(
        self,
        settings: Settings,
        connection: KafkaConnection,
        cache: MetadataCache,
        repository: MetadataRepository,
        tracker: Tracker | None = None,
        tracing: Tracing | None = None,
        events: SubscriptionEvents | None = None,
    ) -> None:
        self._tracing = tracing
        self._events = events
        self._settings = settings
        self._connection = connection
        self._cache = cache
        self._repository = repository
        self._tracker = tracker
        self._placement: Callable[[str], bool] = lambda subscription: True  # by the subscription's qualified name
        self._clustered = False  # placed by a cluster: each subscription's consumer group shares its partitions
        self._reader: SharedReader | None = None  # one node: one Kafka consumer reads for every subscription
        self._rate_share: Callable[[str], float | None] = lambda subscription: None  # all of its rate
        self._context: ConsumerContext | None = None
        self._consumers: dict[tuple[str, str], ConsumerProcess] = {}
        self._session: aiohttp.ClientSession | None = None
        self._oauth: OAuthTokens | None = None
        self._lock = asyncio.Lock()
        self._crashes: dict[tuple[str, str], tuple[int, float]] = {}  # crashes in a row, last restart time
        self._restarts: set[asyncio.Task[None]] = set()
        self._started_or_stopped: float | None = None  # when consumers last came or went, until frozen again
        self._stopped = False  # whether a consumer stopped since the last freeze: its cycles may be frozen
        self._reporter: asyncio.Task[None] | None = None
        self._gc_threshold = gc.get_threshold()  # the process's, put back on stop
        self._redriving: set[str] = set()  # subscriptions (group.topic$name) that had an unfinished redrive

    async def start(self) -> None:
        gc.set_threshold(_YOUNG_COLLECTION_EVERY, *self._gc_threshold[1:])
        resolver = load_resolver(self._settings.endpoint_address_resolver)
        tls = client_context(self._settings.consumer_tls_ca_file)
        self._session = aiohttp.ClientSession(  # OAuth token endpoints
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=60, ssl=tls),
            auto_decompress=False,
        )
        s = self._settings
        self._oauth = OAuthTokens(TokenClient(self._session), self._cache.oauth_providers.get)
        self._cache.on_oauth_provider_change(self._oauth.provider_changed)
        self._cache.on_subscription_change(self._oauth.subscription_changed)
        self._context = ConsumerContext(
            connection=self._connection,
            sender=MessageSenders(HttpSender(self._oauth, tls, self._tracing)),
            repository=self._repository,
            content=ContentConverter(self._repository),
            node_id=s.node_id,
            cluster=s.cluster_name,
            tracker=self._tracker,
            tracing=self._tracing,
            events=self._events,
            commit_interval=s.consumer_commit_interval,
            metrics_interval=s.consumer_metrics_interval,
            session_timeout_ms=s.consumer_session_timeout_ms,
            fetch_wait_ms=s.consumer_fetch_wait_ms,
            read_ahead_messages=s.consumer_read_ahead_messages,
            read_ahead_bytes=s.consumer_read_ahead_bytes,
            rate=RateSettings(period=s.consumer_rate_period, heartbeat_interval=s.consumer_heartbeat_interval),
            failure_log_interval=s.consumer_failure_log_interval,
            resolver=resolver,
            offloaded=OffloadedMessages(
                credentials=_kafka_user(self._connection), budget=BodyBudget(s.consumer_offloaded_bytes)
            ),
            parking=ParkingLot(
                self._connection,
                s.node_id,
                s.consumer_commit_interval,
                grouped=self._clustered or s.consumer_reading != "shared",
                session_timeout_ms=s.consumer_session_timeout_ms,
            ),
            dead_letters=DeadLetters(self._connection),
        )
        assert self._context.parking is not None
        await self._context.parking.start()
        if not self._clustered and self._settings.consumer_reading == "shared":
            self._reader = SharedReader(self._context)
            self._reader.start()
        self._cache.on_subscription_change(self._on_change)
        self._cache.on_document_change(RETRANSMISSION, self._on_retransmission)
        self._cache.on_document_change(DEAD_LETTER_REDRIVES, self._on_redrive)
        # subscriptions with a redrive under way, once for all: their consumers take it up when they start
        redrives = await until_reachable(self._repository.list_documents, DEAD_LETTER_REDRIVES)
        self._redriving = {key.rpartition("/")[0] for key, d in redrives.items() if d.get("status") != "DONE"}
        self._reporter = asyncio.create_task(self._report(), name="subscription-metrics")
        for subscription in list(self._cache.subscriptions.values()):
            await self._apply(subscription.topic_name, subscription.name, subscription)

    async def stop(self) -> None:
        await cancel(self._reporter)
        async with self._lock:  # a restart stopping its crashed consumer holds the lock until that is done
            for task in list(self._restarts):
                task.cancel()
            consumers, self._consumers = list(self._consumers.values()), {}
        await asyncio.gather(*(c.stop() for c in consumers), return_exceptions=True)
        if self._reader is not None:
            await self._reader.stop()
        gc.set_threshold(*self._gc_threshold)
        if self._oauth is not None:
            self._oauth.close()
        if self._context is not None:
            if self._context.parking is not None:
                await self._context.parking.stop()
            await self._context.sender.close()
            await self._context.offloaded.close()
            if self._context.dead_letters is not None:
                await asyncio.to_thread(self._context.dead_letters.close)
        if self._session is not None:
            await self._session.close()
        # What _freeze froze, this supervisor and its Kafka clients among it, is collectable again: frozen, a
        # stopped supervisor's cycles were never collected, nor their clients' threads and pipes (64 a stop).
        gc.unfreeze()

    async def _report(self) -> None:
        """Every metrics interval, the snapshots of the subscriptions whose figures changed, in one write."""
        while True:
            await asyncio.sleep(self._settings.consumer_metrics_interval)
            if self._started_or_stopped is not None and time.monotonic() - self._started_or_stopped > _FREEZE_AFTER:
                self._started_or_stopped = None
                _freeze(thaw=self._stopped)
                self._stopped = False
            assert self._context is not None
            async with self._context.metrics_writes:  # a consumer stopping meanwhile writes its last one after
                await self._write_snapshots()

    async def _write_snapshots(self) -> None:
        snapshots = {}
        for index, consumer in enumerate(list(self._consumers.values())):
            if index % _REPORTS_PER_TURN == _REPORTS_PER_TURN - 1:
                await asyncio.sleep(0)  # deliveries go on between the snapshots of a thousand subscriptions
            try:
                if (snapshot := consumer.report(changed_only=True)) is not None:
                    snapshots[consumer.snapshot_key] = snapshot
            except Exception:
                log.warning("reporting of %s failed", consumer.name, exc_info=True)
        if snapshots:
            try:
                await asyncio.to_thread(self._repository.put_documents, SUBSCRIPTION_METRICS, snapshots)
            except MetadataUnreachable as exc:
                log.warning("writing the subscriptions' metrics failed: %s", exc.message)
            except Exception:
                log.warning("writing the subscriptions' metrics failed", exc_info=True)

    @property
    def consumers(self) -> dict[tuple[str, str], ConsumerProcess]:
        return dict(self._consumers)

    def crashes(self, topic: str, name: str) -> int:
        """Crashes in a row of the subscription's consumer (0 when it never crashed or recovered long ago)."""
        return self._crashes.get((topic, name), (0, 0.0))[0]

    def _crash_listener(self, key: tuple[str, str]) -> CrashListener:
        def crashed(error: BaseException) -> None:
            task = asyncio.create_task(self._restart(key, error), name=f"restart-{key[0]}${key[1]}")
            self._restarts.add(task)
            task.add_done_callback(self._restarts.discard)

        return crashed

    async def _restart(self, key: tuple[str, str], error: BaseException) -> None:
        s = self._settings
        async with self._lock:
            consumer = self._consumers.get(key)
            if consumer is None or consumer.crash is not error:
                return  # stopped or replaced meanwhile: nothing to restart
            count, restarted = self._crashes.get(key, (0, 0.0))
            if time.monotonic() - restarted > 10 * s.consumer_restart_backoff_max:
                count = 0  # it ran well for long: a new problem, not the same one again
            count += 1
            delay = min(s.consumer_restart_backoff * 2 ** min(count - 1, 30), s.consumer_restart_backoff_max)
            log.error(
                "consumer of %s$%s crashed (%s: %s); restarting it in %.1f s (crash %d in a row)",
                *key,
                type(error).__name__,
                error,
                delay,
                count,
            )
            del self._consumers[key]
            await consumer.stop()
        await asyncio.sleep(delay)
        self._crashes[key] = (count, time.monotonic())
        topic, name = key
        await self._apply(TopicName.parse(topic), name, self._cache.subscriptions.get(key))

    async def topic_recreated(self, topic: str) -> None:
        """The broker lost ``topic`` and it was created again. The committed offsets of its subscriptions count
        messages of the old topic (offset 3 there would skip offsets 0-2 of the new one), so every subscription
        of it starts again from the beginning of the new topic: duplicates at worst, never a gap."""
        async with self._lock:
            stopped = [key for key in self._consumers if key[0] == topic]
            for key in stopped:
                await self._consumers.pop(key).stop()
        with BrokerAdmin(self._connection) as admin:
            beginning = await asyncio.to_thread(admin.beginning_offsets, topic)
            for subscription in [s for s in self._cache.subscriptions.values() if s.topic_name.qualified == topic]:
                try:
                    await asyncio.to_thread(admin.commit_offsets, subscription.consumer_group_id, topic, beginning)
                except HermesError as exc:  # a member on another node still holds the group: it reads on from there
                    log.warning("could not rewind %s after its topic was created again: %s", subscription, exc.message)
        for key in stopped:
            await self._apply(TopicName.parse(topic), key[1], self._cache.subscriptions.get(key))

    def place(self, placement: Callable[[str], bool], rate_share: Callable[[str], float | None]) -> None:
        """In a cluster, before ``start``: whether this node runs a subscription, and its share of the rate."""
        self._placement, self._rate_share = placement, rate_share
        self._clustered = True

    async def replace(self) -> None:
        """Starts and stops consumers after ``placement`` changed its answers."""
        for key in [k for k in self._consumers if k not in self._cache.subscriptions]:
            await self._apply(TopicName.parse(key[0]), key[1], None)
        for subscription in list(self._cache.subscriptions.values()):
            await self._apply(subscription.topic_name, subscription.name, subscription)

    async def _on_change(self, topic: TopicName, name: str, subscription: Subscription | None) -> None:
        await self._apply(topic, name, subscription)

    async def _on_retransmission(self, subscription: str) -> None:
        topic, _, name = subscription.partition("$")
        async with self._lock:  # not while the consumer starts or stops
            consumer = self._consumers.get((topic, name))
            if consumer is not None:
                await consumer.retransmission_requested()

    async def _on_redrive(self, key: str) -> None:
        subscription = key.rpartition("/")[0]
        self._redriving.add(subscription)  # until this process stops: a consumer started later looks once
        topic, _, name = subscription.partition("$")
        if (consumer := self._consumers.get((topic, name))) is not None:
            consumer.redrives.requested()

    async def _apply(self, topic: TopicName, name: str, subscription: Subscription | None) -> None:
        key = (topic.qualified, name)
        async with self._lock:
            current = self._consumers.get(key)
            active = subscription is not None and subscription.runs and self._placement(f"{key[0]}${name}")
            if (
                current is not None
                and subscription is not None
                and current.subscription.is_batch != (subscription.is_batch)
            ):
                del self._consumers[key]  # the delivery type changed: the other kind of consumer takes over
                await current.stop()
                self._stopped = True
                current = None
            if current is not None and not active:
                del self._consumers[key]
                await current.stop()
                self._started_or_stopped = time.monotonic()
                self._stopped = True
                log.info("stopped consumer of %s$%s", topic, name)
            elif current is not None and subscription is not None:
                current.update(subscription)
            elif current is None and active and subscription is not None:
                assert self._context is not None
                consumer = ConsumerProcess(subscription, self._context, self._crash_listener(key), self._reader)
                consumer.delivery.set_rate_share(self._rate_share(f"{key[0]}${name}"))  # before its first slot
                self._consumers[key] = consumer
                await consumer.start()
                if consumer.name in self._redriving:
                    consumer.redrives.requested()
                self._started_or_stopped = time.monotonic()
                log.info("started consumer of %s$%s", topic, name)
                if subscription.state is SubscriptionState.PENDING:
                    await asyncio.to_thread(self._activate, topic, name)

    def _activate(self, topic: TopicName, name: str) -> None:
        """As Hermes' consumers: a PENDING subscription becomes ACTIVE once a consumer runs it (unless its user
        changed the state meanwhile)."""

        def started(current: Subscription) -> Subscription:
            if current.state is not SubscriptionState.PENDING:
                return current
            return dataclasses.replace(current, state=SubscriptionState.ACTIVE)

        try:
            self._repository.update_subscription(topic, name, started)
        except HermesError as exc:  # deleted meanwhile, or the store unreachable: it runs all the same
            log.warning("could not mark %s$%s ACTIVE: %s", topic, name, exc.message)


def _freeze(thaw: bool) -> None:
    """Moves every object alive now out of the collector's reach (as the process does once started). Unfrozen, a
    thousand subscriptions' consumers (45,000 objects) were walked by every full collection, one every second or two
    at 2 msg/s each (docs/benchmarks.md, "Latency at a low rate per subscription"). ``thaw`` (consumers stopped since
    the last time): first collects what they left in cycles among the frozen, a collection walking every object of
    the process (40-64 ms at a thousand subscriptions, a pause of every delivery); consumers only started need just
    their own new objects walked."""
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def _kafka_user(connection: KafkaConnection) -> tuple[str, str] | None:
    """Hermes' SCRAM user on Kafka: the offload service signs it in too."""
    security = dict(connection.security)
    if security.get("sasl.mechanism") != "SCRAM-SHA-512" or "sasl.password" not in security:
        return None
    return security["sasl.username"], security["sasl.password"]

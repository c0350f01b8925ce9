"""Runs one consumer per active subscription, following the metadata cache's notifications."""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from hermes.broker.connection import KafkaConnection
from hermes.config import Settings
from hermes.consumers.batch import BatchConsumer
from hermes.consumers.consumer import ConsumerContext, SerialConsumer
from hermes.consumers.content import ContentConverter
from hermes.consumers.rate import RateSettings
from hermes.consumers.sender.http import HttpSender
from hermes.domain.names import TopicName
from hermes.domain.subscription import Subscription, SubscriptionState
from hermes.metadata.cache import MetadataCache
from hermes.metadata.repository import MetadataRepository
from hermes.tracking import Tracker

log = logging.getLogger(__name__)


class ConsumersSupervisor:
    def __init__(
        self,
        settings: Settings,
        connection: KafkaConnection,
        cache: MetadataCache,
        repository: MetadataRepository,
        tracker: Tracker | None = None,
    ) -> None:
        self._settings = settings
        self._connection = connection
        self._cache = cache
        self._repository = repository
        self._tracker = tracker
        self._context: ConsumerContext | None = None
        self._consumers: dict[tuple[str, str], SerialConsumer] = {}
        self._session: aiohttp.ClientSession | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=60),
            auto_decompress=False,
        )
        s = self._settings
        self._context = ConsumerContext(
            connection=self._connection,
            sender=HttpSender(self._session),
            repository=self._repository,
            content=ContentConverter(self._repository),
            node_id=s.node_id,
            cluster=s.cluster_name,
            tracker=self._tracker,
            commit_interval=s.consumer_commit_interval,
            metrics_interval=s.consumer_metrics_interval,
            session_timeout_ms=s.consumer_session_timeout_ms,
            fetch_wait_max_ms=s.consumer_fetch_wait_max_ms,
            rate=RateSettings(period=s.consumer_rate_period, heartbeat_interval=s.consumer_heartbeat_interval),
        )
        self._cache.on_subscription_change(self._on_change)
        for subscription in list(self._cache.subscriptions.values()):
            await self._apply(subscription.topic_name, subscription.name, subscription)

    async def stop(self) -> None:
        async with self._lock:
            consumers, self._consumers = list(self._consumers.values()), {}
        await asyncio.gather(*(c.stop() for c in consumers), return_exceptions=True)
        if self._context is not None:
            await self._context.sender.close()
        if self._session is not None:
            await self._session.close()

    @property
    def consumers(self) -> dict[tuple[str, str], SerialConsumer]:
        return dict(self._consumers)

    async def _on_change(self, topic: TopicName, name: str, subscription: Subscription | None) -> None:
        await self._apply(topic, name, subscription)

    async def _apply(self, topic: TopicName, name: str, subscription: Subscription | None) -> None:
        key = (topic.qualified, name)
        async with self._lock:
            current = self._consumers.get(key)
            active = subscription is not None and subscription.state is SubscriptionState.ACTIVE
            if (
                current is not None
                and subscription is not None
                and current.subscription.is_batch != (subscription.is_batch)
            ):
                del self._consumers[key]  # the delivery type changed: the other kind of consumer takes over
                await current.stop()
                current = None
            if current is not None and not active:
                del self._consumers[key]
                await current.stop()
                log.info("stopped consumer of %s$%s", topic, name)
            elif current is not None and subscription is not None:
                current.update(subscription)
            elif current is None and active and subscription is not None:
                assert self._context is not None
                kind = BatchConsumer if subscription.is_batch else SerialConsumer
                consumer = kind(subscription, self._context)
                self._consumers[key] = consumer
                await consumer.start()
                log.info("started consumer of %s$%s", topic, name)

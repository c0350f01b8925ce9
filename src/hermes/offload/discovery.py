"""Discovery: the latest record of the ``sys.metadata`` topic is a JSON object whose ``LargeMessageUploadEndpoint``
is the offload service's URL. Kafka clients that speak the protocol read it to find the service; it is produced
again only when it says something else (the topic keeps its records forever, so the latest one stays)."""

from __future__ import annotations

import asyncio
import logging

import orjson

from hermes.broker.admin import BrokerAdmin
from hermes.broker.producer import BrokerProducer
from hermes.broker.topics import OFFLOAD_DISCOVERY
from hermes.domain.topic import Ack
from hermes.errors import HermesError

log = logging.getLogger(__name__)

METADATA_TOPIC = OFFLOAD_DISCOVERY.name
ENDPOINT_KEY = "LargeMessageUploadEndpoint"
_RETRY_DELAY = 5.0


def discovery_document(endpoint: str) -> bytes:
    return orjson.dumps({ENDPOINT_KEY: endpoint})


async def advertise(admin: BrokerAdmin, producer: BrokerProducer, endpoint: str) -> None:
    """Makes ``endpoint`` the one the latest ``sys.metadata`` record advertises."""
    if not await asyncio.to_thread(admin.topic_exists, METADATA_TOPIC):
        partitions, retention_ms = OFFLOAD_DISCOVERY.partitions or 1, OFFLOAD_DISCOVERY.retention_ms
        await asyncio.to_thread(admin.create_topic, METADATA_TOPIC, partitions, retention_ms=retention_ms)
    latest = await asyncio.to_thread(admin.last_value, METADATA_TOPIC)
    if latest == discovery_document(endpoint):
        return
    await producer.send(METADATA_TOPIC, discovery_document(endpoint), ack=Ack.ALL)
    log.info("large messages: %s advertises the offload service at %s", METADATA_TOPIC, endpoint)


async def advertise_at_start(admin: BrokerAdmin, producer: BrokerProducer, endpoint: str) -> asyncio.Task[None] | None:
    """``advertise`` now; when the broker fails it, a task that tries again every few seconds (the frontend
    starts all the same: the service works, Kafka clients only cannot find it yet)."""
    try:
        await advertise(admin, producer, endpoint)
        return None
    except HermesError as exc:
        log.warning("large messages: advertising the offload service failed (tried again): %s", exc.message)
    return asyncio.create_task(_advertise_until_done(admin, producer, endpoint), name="offload-discovery")


async def _advertise_until_done(admin: BrokerAdmin, producer: BrokerProducer, endpoint: str) -> None:
    while True:
        await asyncio.sleep(_RETRY_DELAY)
        try:
            await advertise(admin, producer, endpoint)
            return
        except HermesError as exc:
            log.warning("large messages: advertising the offload service failed (tried again): %s", exc.message)

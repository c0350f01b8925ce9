"""The asyncio client: ``AsyncHermesClient``, the methods of ``HermesClient`` (``sync.py``), awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import httpx

from hermes.client import calls
from hermes.client.calls import Call, JsonObject
from hermes.client.connection import Connection
from hermes.client.responses import PublishResult
from hermes.client.retries import RetryPolicy, unreachable
from hermes.errors import HermesError

T = TypeVar("T")


class AsyncHermesClient:
    """Pools connections to the management API and the frontend; use it as a context manager, or ``close`` it."""

    def __init__(
        self,
        connection: Connection | None = None,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.connection = connection or Connection()
        self.retry = retry or RetryPolicy()
        self._management = self.connection.async_client(self.connection.management_url, transport)
        self._frontend = self.connection.async_client(self.connection.frontend_url, transport)

    async def __aenter__(self) -> AsyncHermesClient:
        return self

    async def __aexit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self._management.aclose()
        await self._frontend.aclose()

    async def send(self, call: Call[T], frontend: bool = False) -> T:
        """Sends one call (retried as ``retry`` allows) and reads its answer; raises ``HermesError``s."""
        http = self._frontend if frontend else self._management
        attempt = 0
        while True:
            try:
                response = await http.request(
                    call.method, call.path, params=dict(call.params), content=call.body, headers=dict(call.headers)
                )
            except httpx.TransportError as exc:
                if not self.retry.retries_error(attempt, exc, call.idempotent):
                    raise unreachable(str(http.base_url), exc) from None
                await asyncio.sleep(self.retry.wait(attempt))
            else:
                if not self.retry.retries_status(attempt, response.status_code):
                    return call.answer(response.status_code, response.headers, response.content)
                await asyncio.sleep(self.retry.wait(attempt, response.headers))
            attempt += 1

    # Publishing

    async def publish(
        self,
        topic: str,
        body: bytes | str | Any,
        headers: Mapping[str, str] | None = None,
        partition_key: str | None = None,
        idempotency_key: str | None = None,
    ) -> PublishResult:
        """``body``: bytes or text as they are, anything else as JSON. ``idempotency_key``: a repeat of this
        publish within the topic's window (a retry after a lost answer too) stores nothing and answers as the first
        (``PublishResult.replayed``)."""
        return await self.send(calls.publish(topic, body, headers, partition_key, idempotency_key), frontend=True)

    async def publish_many(
        self, topic: str, bodies: Iterable[bytes | str | Any], concurrency: int = 16
    ) -> list[PublishResult | HermesError]:
        """Publishes every body, at most ``concurrency`` at once; each one's result or error, in order."""
        bound = asyncio.Semaphore(max(1, concurrency))

        async def one(body: bytes | str | Any) -> PublishResult | HermesError:
            async with bound:
                try:
                    return await self.publish(topic, body)
                except HermesError as exc:
                    return exc

        return list(await asyncio.gather(*(one(body) for body in bodies)))

    # Groups

    async def groups(self) -> list[str]:
        return await self.send(calls.groups())

    async def create_group(self, name: str) -> None:
        await self.send(calls.create_group(name))

    async def delete_group(self, name: str) -> None:
        await self.send(calls.delete_group(name))

    # Topics

    async def topics(self, group: str | None = None) -> list[str]:
        return await self.send(calls.topics(group))

    async def topic(self, name: str) -> JsonObject:
        return await self.send(calls.topic(name))

    async def create_topic(self, name: str, **fields: Any) -> JsonObject:
        """``fields``: the API's, e.g. ``contentType="AVRO"``, ``owner={...}``; JSON and a client owner by default."""
        return await self.send(calls.create_topic(name, fields))

    async def update_topic(self, name: str, **changes: Any) -> None:
        await self.send(calls.update_topic(name, changes))

    async def delete_topic(self, name: str) -> None:
        await self.send(calls.delete_topic(name))

    async def topic_metrics(self, name: str) -> JsonObject:
        return await self.send(calls.topic_metrics(name))

    # Subscriptions

    async def subscriptions(self, topic: str) -> list[str]:
        return await self.send(calls.subscriptions(topic))

    async def subscription(self, topic: str, name: str) -> JsonObject:
        return await self.send(calls.subscription(topic, name))

    async def create_subscription(self, topic: str, name: str, endpoint: str, **fields: Any) -> JsonObject:
        return await self.send(calls.create_subscription(topic, name, endpoint, fields))

    async def update_subscription(self, topic: str, name: str, **changes: Any) -> None:
        await self.send(calls.update_subscription(topic, name, changes))

    async def delete_subscription(self, topic: str, name: str) -> None:
        await self.send(calls.delete_subscription(topic, name))

    async def suspend(self, topic: str, name: str) -> None:
        await self.send(calls.set_state(topic, name, "SUSPENDED"))

    async def activate(self, topic: str, name: str) -> None:
        await self.send(calls.set_state(topic, name, "ACTIVE"))

    async def subscription_metrics(self, topic: str, name: str) -> JsonObject:
        return await self.send(calls.subscription_metrics(topic, name))

    async def subscription_health(self, topic: str, name: str) -> JsonObject:
        return await self.send(calls.subscription_health(topic, name))

    async def last_undelivered(self, topic: str, name: str) -> JsonObject | None:
        return await self.send(calls.last_undelivered(topic, name))

    async def retransmit(self, topic: str, name: str, since: str, dry_run: bool = False) -> JsonObject:
        """Moves the subscription back to ``since`` (ISO-8601, or ``-6h``): the partitions and their new offsets."""
        return await self.send(calls.retransmit(topic, name, since, dry_run))

    async def consumer_groups(self, topic: str, name: str) -> list[JsonObject]:
        return await self.send(calls.consumer_groups(topic, name))

    async def trace(self, topic: str, name: str, message_id: str) -> list[JsonObject]:
        return await self.send(calls.trace(topic, name, message_id))

    # Offline retransmission

    async def create_offline_retransmission(self, source: str, target: str, start: str, end: str) -> JsonObject:
        return await self.send(calls.create_offline_retransmission(source, target, start, end))

    async def offline_retransmissions(self) -> list[JsonObject]:
        return await self.send(calls.offline_retransmissions())

    async def offline_retransmission(self, task_id: str) -> JsonObject:
        return calls.find_task(await self.offline_retransmissions(), task_id)

    async def delete_offline_retransmission(self, task_id: str) -> None:
        await self.send(calls.delete_offline_retransmission(task_id))

"""Offloaded large messages, resolved before filters and delivery: the placeholder's URL is fetched (a few tries,
backing off) and the message goes on with the stored body. A message whose body is gone (expired with its topic's
retention, deleted with the topic) or cannot be fetched raises, and its delivery discards it with that reason."""

from __future__ import annotations

import asyncio
import dataclasses

import aiohttp
import bson
from bson.errors import BSONError

from hermes.domain.message import Message
from hermes.errors import HermesError, OffloadedMessageNotFound, ServiceUnavailable


class OffloadedMessages:
    def __init__(self, attempts: int = 3, backoff: float = 0.5, timeout: float = 120.0) -> None:
        self._attempts = attempts
        self._backoff = backoff
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def resolve(self, message: Message) -> Message:
        url = message.external_url or ""
        if not url.startswith(("http://", "https://")):
            raise OffloadedMessageNotFound(f"the placeholder of offloaded message {message.message_id} has no URL")
        document = await self._fetch(url)
        try:
            body = bson.decode(document).get("message")
        except (BSONError, ValueError, TypeError) as exc:
            raise HermesError(f"the offloaded message at {url} is not a BSON document: {exc}") from None
        if not isinstance(body, bytes):
            raise HermesError(f"the offloaded message at {url} has no binary message field")
        return dataclasses.replace(message, body=body, external_url=None)

    async def _fetch(self, url: str) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        problem = ""
        for attempt in range(self._attempts):
            if attempt:
                await asyncio.sleep(self._backoff * 2 ** (attempt - 1))
            try:
                async with self._session.get(url) as response:
                    if response.status == 200:
                        return await response.read()
                    if response.status == 404:
                        raise OffloadedMessageNotFound(
                            f"the offloaded message at {url} is gone (expired with its topic's retention, or deleted)"
                        )
                    problem = f"{url} answered {response.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                problem = f"{url} could not be fetched: {exc or type(exc).__name__}"
        raise ServiceUnavailable(f"the offloaded message was not fetched in {self._attempts} tries: {problem}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

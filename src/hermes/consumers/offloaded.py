"""Offloaded large messages, resolved before filters and delivery: the placeholder's URL is fetched (a few tries,
backing off) and the message goes on with the stored body. A message whose body is gone (expired with its topic's
retention, deleted with the topic) or cannot be fetched raises, and its delivery discards it with that reason."""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import aiohttp
import bson
from bson.errors import BSONError
from scramp import ScramClient, ScramException

from hermes.domain.message import Message
from hermes.errors import HermesError, OffloadedMessageNotFound, ServiceUnavailable

SCRAM = "SCRAM-SHA-512"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class OffloadedMessages:
    def __init__(
        self,
        attempts: int = 3,
        backoff: float = 0.5,
        timeout: float = 120.0,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        self._credentials = credentials  # Hermes' Kafka user, for an offload service that signs users in by SCRAM
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
                headers = await self._sign_in(url) if self._credentials is not None else {}
                async with self._session.get(url, headers=headers) as response:
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

    async def _sign_in(self, url: str) -> dict[str, str]:
        """The first half of an HTTP SCRAM exchange (RFC 7804); the Authorization header that completes it."""
        assert self._session is not None and self._credentials is not None
        client = ScramClient([SCRAM], *self._credentials)
        first = f"{SCRAM} data={_b64(client.get_client_first())}"
        async with self._session.get(url, headers={"Authorization": first}) as response:
            challenge = response.headers.get("WWW-Authenticate", "")
        scheme, _, rest = challenge.partition(" ")
        attributes = dict(part.strip().partition("=")[::2] for part in rest.split(","))
        if scheme != SCRAM or "sid" not in attributes:
            raise ServiceUnavailable(f"{url} did not continue the SCRAM exchange ({response.status})")
        try:
            client.set_server_first(base64.b64decode(attributes.get("data", "")).decode())
            final = client.get_client_final()
        except (ScramException, ValueError) as exc:
            raise ServiceUnavailable(f"{url}: SCRAM failed: {exc}") from None
        return {"Authorization": f"{SCRAM} sid={attributes['sid']}, data={_b64(final)}"}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

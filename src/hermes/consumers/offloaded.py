"""Offloaded large messages, resolved before filters and delivery: the placeholder's URL is fetched (a few tries,
backing off) and the message goes on with the stored body. A message whose body is gone (expired with its topic's
retention, deleted with the topic) or cannot be fetched raises, and its delivery discards it with that reason.

The document is streamed to a temporary file as it arrives and stays there: the message carries the region of its
``message`` field (``Message.stored``), which is streamed to subscribers from the file and read whole only where a
filter or a conversion needs it. The file is removed once the message is finished. The bodies held at once are
bounded by a byte budget (``BodyBudget``)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import tempfile
from collections.abc import Callable

import aiohttp
from scramp import ScramClient, ScramException

from hermes.consumers.body_budget import BodyBudget
from hermes.domain.bson_document import find_message
from hermes.domain.message import Message
from hermes.errors import HermesError, OffloadedMessageNotFound, ServiceUnavailable
from hermes.http.streamed import FileRegion

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
        budget: BodyBudget | None = None,
    ) -> None:
        self.budget = budget or BodyBudget()
        self._credentials = credentials  # Hermes' Kafka user, for an offload service that signs users in by SCRAM
        self._attempts = attempts
        self._backoff = backoff
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def resolve(self, message: Message, wait: bool = True) -> Message | None:
        """The message with its stored body (``stored``; close it once the message is finished). None when the
        budget has no room for the body and ``wait`` is False."""
        url = message.external_url or ""
        if not url.startswith(("http://", "https://")):
            raise OffloadedMessageNotFound(f"the placeholder of offloaded message {message.message_id} has no URL")
        stored = await self._fetch(url, wait)
        return None if stored is None else dataclasses.replace(message, stored=stored, external_url=None)

    async def _fetch(self, url: str, wait: bool) -> FileRegion | None:
        """The message field of the document at that URL. The document's size (its Content-Length) is taken from
        the budget before it is read; without room, the response is dropped, and once there is room (the bytes
        then reserved) the document is asked for again."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        problem = ""
        reserved = 0
        attempt = 0
        try:
            while attempt < self._attempts:
                if attempt:
                    await asyncio.sleep(self._backoff * 2 ** (attempt - 1))
                attempt += 1
                wanted = 0
                try:
                    headers = await self._sign_in(url) if self._credentials is not None else {}
                    async with self._session.get(url, headers=headers) as response:
                        if response.status == 200:
                            size = response.content_length or 0
                            if size <= reserved or self.budget.try_take(size - reserved):
                                reserved = max(size, reserved)
                                stored = await _message_of(response, url, functools.partial(self.budget.give, reserved))
                                reserved = 0  # the stored body gives it back when it is closed
                                return stored
                            wanted = size
                        elif response.status == 404:
                            raise OffloadedMessageNotFound(
                                f"the offloaded message at {url} is gone"
                                " (expired with its topic's retention, or deleted)"
                            )
                        else:
                            problem = f"{url} answered {response.status}"
                except (aiohttp.ClientError, TimeoutError) as exc:
                    problem = f"{url} could not be fetched: {exc or type(exc).__name__}"
                if wanted:  # no room: not a failed try
                    if not wait:
                        return None
                    await self.budget.take(wanted - reserved)
                    reserved, attempt = wanted, attempt - 1
        finally:
            if reserved:
                self.budget.give(reserved)
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


async def _message_of(response: aiohttp.ClientResponse, url: str, release: Callable[[], None]) -> FileRegion:
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - the returned region owns it
    try:
        async for chunk in response.content.iter_chunked(1 << 20):
            spool.write(chunk)  # into the page cache: short enough for the event loop
        spool.flush()  # the region reads the file itself, not this buffer
        try:
            offset, size = await asyncio.to_thread(find_message, spool)
        except HermesError as exc:
            raise HermesError(f"the offloaded message at {url} is not a valid document: {exc}") from None
    except BaseException:
        spool.close()
        raise
    return FileRegion(spool, offset, size, release)

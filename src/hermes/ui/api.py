"""The console's only way to Hermes: the management and publishing APIs over HTTP, each call with the user's
``Authorization`` header, so that the API decides what the user may see and do."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from yarl import URL

from hermes.errors import ApiRefused

Json = Any


@dataclass(frozen=True)
class Upstream:
    """Where the APIs are: functions, because a port 0 is known only once its server listens."""

    management_url: Callable[[], str]
    frontend_url: Callable[[], str]
    tls: ssl.SSLContext | None = None  # trusts the listeners' own certificate (the console calls its own port)
    frontend_tls: ssl.SSLContext | None = None  # likewise for the publishing API; None: the system's authorities


class Api:
    """The APIs as one user sees them (``authorization`` None: without credentials)."""

    def __init__(self, session: aiohttp.ClientSession, upstream: Upstream, authorization: str | None) -> None:
        self._session = session
        self._upstream = upstream
        self._headers = {"Authorization": authorization} if authorization else {}

    async def get(self, path: str) -> Json:
        return await self.call("GET", path)

    async def get_or_none(self, path: str) -> Json:
        """The answer, or None when the API says 404 or forbids the user to read it."""
        try:
            return await self.get(path)
        except ApiRefused as refused:
            if refused.status in (403, 404):
                return None
            raise

    async def call(self, method: str, path: str, body: Json = None, raw: str | None = None) -> Json:
        """The management API's answer to ``method path`` with ``body`` as JSON (or ``raw`` text)."""
        data = raw.encode() if raw is not None else None if body is None else orjson.dumps(body)
        headers = {**self._headers, "Content-Type": "application/json"} if data is not None else self._headers
        return await self._send(method, self._upstream.management_url() + path, data, headers)

    async def publish(self, topic: str, body: str, content_type: str) -> str:
        """Publishes ``body`` through the publishing API; the new message's Hermes-Message-Id."""
        url = URL(f"{self._upstream.frontend_url()}/topics/{topic}", encoded=True)
        headers = {**self._headers, "Content-Type": content_type}
        tls = self._upstream.frontend_tls or True
        async with self._session.post(url, data=body.encode(), headers=headers, ssl=tls) as response:
            if response.status >= 300:
                raise _refusal(response.status, await response.read())
            return response.headers.get("Hermes-Message-Id", "")

    async def _send(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> Json:
        target = URL(url, encoded=True)  # the pages quoted every name: no dot segment is resolved, no ? splits
        tls = self._upstream.tls or True
        async with self._session.request(method, target, data=data, headers=headers, ssl=tls) as response:
            content = await response.read()
            if response.status >= 300:
                raise _refusal(response.status, content)
            return orjson.loads(content) if content else None


def _refusal(status: int, content: bytes) -> ApiRefused:
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and "message" in body:
        return ApiRefused(status, str(body.get("code", "")), str(body["message"]))
    return ApiRefused(status, "", content.decode("utf-8", "replace")[:500] or f"HTTP {status}")

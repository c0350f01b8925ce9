"""The sender of each endpoint's protocol: HTTP(S) (``http.py``) or a JMS broker (``jms.py``)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from hermes.consumers.sender.http import HttpSender
from hermes.consumers.sender.result import SendResult
from hermes.domain.jms import JMS_SCHEME
from hermes.domain.message import Message
from hermes.domain.subscription import Subscription
from hermes.http.streamed import Body

if TYPE_CHECKING:
    from hermes.consumers.sender.jms import JmsSender

_JMS_PREFIX = f"{JMS_SCHEME}://"


class MessageSenders:
    def __init__(self, http: HttpSender) -> None:
        self._http = http
        self._jms: JmsSender | None = None  # made at the first jms:// endpoint: stomp.py only for those who use one

    def headers(
        self, subscription: Subscription, message: Message, retry_count: int, content_type: str
    ) -> dict[str, str]:
        """A delivery's headers, as an HTTP subscriber gets them (a JMS message gets them as properties)."""
        return self._http.headers(subscription, message, retry_count, content_type)

    def send(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> Awaitable[SendResult]:
        if not url.startswith(_JMS_PREFIX):  # the HTTP sender's coroutine itself: one fewer to resume per answer
            return self._http.send(subscription, url, body, headers, timeout_ms)
        return self._send_jms(subscription, url, body, headers, timeout_ms)

    async def _send_jms(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> SendResult:
        if self._jms is None:
            try:
                from hermes.consumers.sender.jms import JmsSender
            except ImportError:
                return SendResult.failure("jms:// endpoints need stomp.py: install hermes-broker[jms]")
            self._jms = JmsSender()
        return await self._jms.send(subscription, url, body, headers, timeout_ms)

    async def close(self) -> None:
        await self._http.close()
        if self._jms is not None:
            await self._jms.close()

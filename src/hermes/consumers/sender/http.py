"""Sending one message to an HTTP endpoint with a pooled keep-alive client (``hermes.http.client``)."""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from hermes.consumers.sender.oauth import OAuthTokens
from hermes.consumers.sender.result import SendResult, network_failure
from hermes.domain.message import (
    BATCH_ID_HEADER,
    MESSAGE_ID_HEADER,
    RETRY_COUNT_HEADER,
    SUBSCRIPTION_NAME_HEADER,
    TOPIC_NAME_HEADER,
    Message,
)
from hermes.domain.retry_rules import STOP_RETRY_HEADER, STOP_RETRY_VALUE
from hermes.domain.signing import signature_headers, signing_now
from hermes.domain.subscription import Subscription
from hermes.domain.trace_context import TRACEPARENT, TRACESTATE, child_traceparent, valid_traceparent
from hermes.http.client import HttpClient
from hermes.http.streamed import Body, StreamedBody

if TYPE_CHECKING:  # imported only when tracing is on: the extra's package
    from hermes.telemetry.spans import Tracing


_STOP_RETRY = STOP_RETRY_HEADER.lower()  # the client keeps answer headers' names in lower case


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


class HttpSender:
    def __init__(
        self, oauth: OAuthTokens | None = None, tls: ssl.SSLContext | None = None, tracing: Tracing | None = None
    ) -> None:
        self._client = HttpClient(tls)
        self._oauth = oauth
        self._tracing = tracing

    def headers(
        self, subscription: Subscription, message: Message, retry_count: int, content_type: str
    ) -> dict[str, str]:
        headers = {
            "Content-Type": content_type,
            MESSAGE_ID_HEADER: message.message_id,
            RETRY_COUNT_HEADER: str(retry_count),
            **message.propagated_headers,
        }
        if not content_type:  # a CloudEvent without datacontenttype, in binary mode
            del headers["Content-Type"]
        if subscription.subscription_identity_headers_enabled:
            headers[TOPIC_NAME_HEADER] = subscription.topic_name.qualified
            headers[SUBSCRIPTION_NAME_HEADER] = subscription.name
        for header in subscription.headers:
            headers[header.name] = header.value
        return headers

    def send(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> Awaitable[SendResult]:
        """Sends one attempt: a span of its own with tracing on; with it off, a traceparent that came with the
        message is sent as that of a new span in its trace. (Each step that need not wait hands on the next one's
        coroutine rather than awaiting it: an answer resumes every coroutine of the chain.)"""
        if self._tracing is not None:
            return self._traced(self._tracing, subscription, url, body, headers, timeout_ms)
        if (traceparent := headers.get(TRACEPARENT)) is not None:
            if valid_traceparent(traceparent):
                headers[TRACEPARENT] = child_traceparent(traceparent)
            else:  # another Kafka producer's record: its header is not trusted
                del headers[TRACEPARENT]
                headers.pop(TRACESTATE, None)
        return self._send(subscription, url, body, headers, timeout_ms)

    async def _traced(
        self,
        tracing: Tracing,
        subscription: Subscription,
        url: str,
        body: Body,
        headers: dict[str, str],
        timeout_ms: int,
    ) -> SendResult:
        with tracing.attempt(subscription.qualified_name.qualified, int(headers[RETRY_COUNT_HEADER]), headers) as span:
            result = await self._send(subscription, url, body, headers, timeout_ms)
            tracing.attempted(span, result.status, "timeout" if result.timed_out else result.error)
        return result

    def _send(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> Awaitable[SendResult]:
        """Sends with the subscription's OAuth bearer token if it has an OAuth policy, else with the
        endpoint's Basic credentials if it has some; signed when the subscription has signing secrets (the
        webhook id is the batch's or the message's id, the same on every retry)."""
        if subscription.signing_secrets:
            return self._signed(subscription, url, body, headers, timeout_ms)
        return self._authorized(subscription, url, body, headers, timeout_ms)

    async def _signed(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> SendResult:
        webhook_id = headers.get(BATCH_ID_HEADER) or headers[MESSAGE_ID_HEADER]
        now = time.time()
        secrets = signing_now(subscription.signing_secrets, subscription.previous_secret_expires_at, int(now * 1000))
        if isinstance(body, StreamedBody):  # read from its file to be signed: off the event loop
            signed = await asyncio.to_thread(signature_headers, secrets, webhook_id, body.chunks(), int(now))
        else:
            signed = signature_headers(secrets, webhook_id, body, int(now))
        return await self._authorized(subscription, url, body, {**headers, **signed}, timeout_ms)

    def _authorized(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> Awaitable[SendResult]:
        if self._oauth is not None and subscription.oauth_policy is not None:
            return self._oauth.send(subscription, headers, lambda h: self._post(subscription, url, body, h, timeout_ms))
        credentials = subscription.endpoint.credentials
        if credentials is not None:
            user, password = credentials
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            headers = {**headers, "Authorization": f"Basic {token}"}
        return self._post(subscription, url, body, headers, timeout_ms)

    async def _post(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> SendResult:
        socket_timeout = subscription.serial_policy.socket_timeout / 1000 or None
        try:
            response = await self._client.post(url, body, headers, timeout_ms / 1000, socket_timeout)
            status, answer = response.status, response.headers
            stop = status >= 300 and answer.get(_STOP_RETRY, "").lower() == STOP_RETRY_VALUE  # a 2xx is a delivery
            return SendResult.of_status(status, parse_retry_after(answer.get("retry-after")), stop)
        except TimeoutError:
            return SendResult.timeout()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure to get an answer is a network error: retried, never fatal
            return SendResult.failure(network_failure(exc, url))

    async def close(self) -> None:
        await self._client.close()

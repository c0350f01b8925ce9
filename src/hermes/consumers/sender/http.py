"""Sending one message to an HTTP endpoint with a pooled keep-alive client (``hermes.http.client``)."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
from urllib.parse import urlsplit

from hermes.consumers.sender.oauth import OAuthTokens
from hermes.consumers.sender.result import SendResult
from hermes.domain.message import (
    BATCH_ID_HEADER,
    MESSAGE_ID_HEADER,
    RETRY_COUNT_HEADER,
    SUBSCRIPTION_NAME_HEADER,
    TOPIC_NAME_HEADER,
    Message,
)
from hermes.domain.signing import signature_headers, signing_now
from hermes.domain.subscription import Subscription
from hermes.errors import HermesError
from hermes.http.client import HttpClient
from hermes.http.streamed import Body, StreamedBody


def parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def network_failure(exc: Exception, url: str) -> str:
    """What kept a request from an answer, in words (``host not found: my-servce.local``, not ``gaierror``)."""
    parts = urlsplit(url)
    host = parts.hostname or url
    address = f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
    if isinstance(exc, HermesError):  # the client's own, e.g. an answer that is not HTTP
        return exc.message
    if isinstance(exc, socket.gaierror):
        return f"host not found: {host}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {address}"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return f"connection closed by {address} before it answered"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the TLS certificate of {host} is not trusted: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS with {address} failed: {exc.reason or exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot connect to {address}: {exc.strerror}"
    return f"{exc} ({address})" if str(exc) else f"no answer from {address} ({type(exc).__name__})"


class HttpSender:
    def __init__(self, oauth: OAuthTokens | None = None, tls: ssl.SSLContext | None = None) -> None:
        self._client = HttpClient(tls)
        self._oauth = oauth

    def headers(
        self, subscription: Subscription, message: Message, retry_count: int, content_type: str
    ) -> dict[str, str]:
        headers = {
            "Content-Type": content_type,
            MESSAGE_ID_HEADER: message.message_id,
            RETRY_COUNT_HEADER: str(retry_count),
            **message.propagated_headers,
        }
        if subscription.subscription_identity_headers_enabled:
            headers[TOPIC_NAME_HEADER] = subscription.topic_name.qualified
            headers[SUBSCRIPTION_NAME_HEADER] = subscription.name
        for header in subscription.headers:
            headers[header.name] = header.value
        return headers

    async def send(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> SendResult:
        """Sends with the subscription's OAuth bearer token if it has an OAuth policy, else with the
        endpoint's Basic credentials if it has some; signed when the subscription has signing secrets (the
        webhook id is the batch's or the message's id, the same on every retry)."""
        if subscription.signing_secrets:
            webhook_id = headers.get(BATCH_ID_HEADER) or headers[MESSAGE_ID_HEADER]
            now = time.time()
            secrets = signing_now(
                subscription.signing_secrets, subscription.previous_secret_expires_at, int(now * 1000)
            )
            if isinstance(body, StreamedBody):  # read from its file to be signed: off the event loop
                signed = await asyncio.to_thread(signature_headers, secrets, webhook_id, body.chunks(), int(now))
            else:
                signed = signature_headers(secrets, webhook_id, body, int(now))
            headers = {**headers, **signed}
        if self._oauth is not None and subscription.oauth_policy is not None:
            return await self._oauth.send(
                subscription, headers, lambda h: self._post(subscription, url, body, h, timeout_ms)
            )
        credentials = subscription.endpoint.credentials
        if credentials is not None:
            user, password = credentials
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            headers = {**headers, "Authorization": f"Basic {token}"}
        return await self._post(subscription, url, body, headers, timeout_ms)

    async def _post(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> SendResult:
        socket_timeout = subscription.serial_policy.socket_timeout / 1000 or None
        try:
            response = await self._client.post(url, body, headers, timeout_ms / 1000, socket_timeout)
            return SendResult.of_status(response.status, parse_retry_after(response.headers.get("retry-after")))
        except TimeoutError:
            return SendResult.timeout()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure to get an answer is a network error: retried, never fatal
            return SendResult.failure(network_failure(exc, url))

    async def close(self) -> None:
        await self._client.close()

"""OAuth 2 towards subscribers: bearer tokens for subscriptions with an ``oAuthPolicy``.

A send goes out with the subscription's cached token (none at first). When the subscriber answers 401, the
token it was sent with is marked rejected; the next send of that subscription requests a new token from the
provider's token endpoint, once for all its concurrent sends, and waits for it. Token requests of one
subscription are at least a delay apart that doubles after each request, from the provider's
``tokenRequestInitialDelay`` up to ``tokenRequestMaxDelay``, and falls back to the initial delay after a 2xx
from the subscriber. Tokens live in memory only; a provider change drops the tokens it issued.

The token request is the standard form-encoded POST (RFC 6749 4.3 and 4.4). The client authenticates with
``client_id`` and ``client_secret`` in the body (RFC 6749 2.3.1): like Hermes, one request carries the client's
and, for the password grant, the resource owner's credentials. Log lines and errors name the subscription and
the provider, never a secret or a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable

import aiohttp
import orjson

from hermes.consumers.sender.result import SendResult, network_failure
from hermes.consumers.subscription_metrics import count_token_request
from hermes.domain.names import SubscriptionName, TopicName
from hermes.domain.oauth import OAuthProvider
from hermes.domain.subscription import OAuthPolicy, Subscription
from hermes.errors import OAuthTokenUnavailable

log = logging.getLogger(__name__)

GRANT_TYPES = {"clientCredentials": "client_credentials", "password": "password"}
# The RFC 6750 token syntax; also what an RFC 6749 "error" code looks like. Anything else from a token
# endpoint is not echoed into logs.
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_ERROR_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")

ProviderLookup = Callable[[str], OAuthProvider | None]
Post = Callable[[dict[str, str]], Awaitable[SendResult]]


class TokenRequestDelay:
    """The least time between two token requests: ``initial`` after the first, doubled after each further
    one up to ``maximum`` (seconds); ``reset`` goes back to ``initial``."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = max(maximum, initial)
        self.current = initial
        self._last: float | None = None

    def wait(self, now: float) -> float:
        """Seconds to wait from ``now`` before the next token request may go out."""
        return 0.0 if self._last is None else max(0.0, self._last + self.current - now)

    def requested(self, now: float) -> None:
        if self._last is not None:
            self.current = min(self.current * 2, self.maximum)
        self._last = now

    def reset(self) -> None:
        self.current = self.initial


def token_form(provider: OAuthProvider, policy: OAuthPolicy) -> dict[str, str]:
    form = {
        "grant_type": GRANT_TYPES[policy.grant_type],
        "client_id": provider.client_id,
        "client_secret": provider.client_secret,
    }
    if policy.grant_type == "password":
        form["username"] = policy.username or ""
        form["password"] = policy.password or ""
    if policy.scope:
        form["scope"] = policy.scope
    return form


def parse_token_response(provider: str, status: int, body: bytes) -> str:
    """The access token of a token endpoint's answer; ``OAuthTokenUnavailable`` saying what is wrong."""
    where = f"the token endpoint of provider {provider}"
    data: object = None
    with contextlib.suppress(orjson.JSONDecodeError):
        data = orjson.loads(body)
    if not 200 <= status < 300:
        error = data.get("error") if isinstance(data, dict) else None
        detail = f" ({error})" if isinstance(error, str) and _ERROR_CODE.fullmatch(error) else ""
        raise OAuthTokenUnavailable(f"{where} answered {status}{detail}")
    if not isinstance(data, dict):
        raise OAuthTokenUnavailable(f"{where} answered {status} without a JSON object")
    token = data.get("access_token")
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise OAuthTokenUnavailable(f"{where} answered {status} without a valid access_token")
    token_type = data.get("token_type", "Bearer")
    if not isinstance(token_type, str) or token_type.lower() != "bearer":
        raise OAuthTokenUnavailable(f"{where} issued a token that is not a Bearer token")
    return token


class TokenClient:
    """Requests tokens from token endpoints over the consumers' HTTP session."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self._session = session

    async def request(self, provider: OAuthProvider, policy: OAuthPolicy) -> str:
        timeout = aiohttp.ClientTimeout(
            total=provider.request_timeout / 1000, sock_read=provider.socket_timeout / 1000 or None
        )
        headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
        try:
            async with self._session.post(
                provider.token_endpoint, data=token_form(provider, policy), headers=headers, timeout=timeout
            ) as response:
                body = await response.read()
                status = response.status
        except TimeoutError:
            raise OAuthTokenUnavailable(
                f"the token endpoint of provider {provider.name} did not answer in time"
            ) from None
        except aiohttp.ClientConnectorError as exc:  # named by host and port only, as a subscriber's
            raise OAuthTokenUnavailable(
                f"the token endpoint of provider {provider.name} failed: "
                f"{network_failure(exc.os_error, provider.token_endpoint)}"
            ) from None
        except aiohttp.ServerDisconnectedError:
            raise OAuthTokenUnavailable(
                f"the token endpoint of provider {provider.name} closed the connection before it answered"
            ) from None
        except aiohttp.ClientError as exc:  # the message may quote the URL: only the kind of failure is kept
            raise OAuthTokenUnavailable(
                f"the token endpoint of provider {provider.name} failed: {type(exc).__name__}"
            ) from None
        return parse_token_response(provider.name, status, body)


class SubscriptionToken:
    """One subscription's token, shared by all its sends."""

    def __init__(
        self, subscription: Subscription, policy: OAuthPolicy, client: TokenClient, providers: ProviderLookup
    ) -> None:
        self.policy = policy
        self._topic = subscription.topic_name.qualified
        self._subscription = subscription.name
        self._client = client
        self._providers = providers
        self._token: str | None = None
        self._rejected = False  # the subscriber refused the current token (or its absence)
        self._delay: TokenRequestDelay | None = None
        self._refresh: asyncio.Task[str] | None = None

    @property
    def name(self) -> str:
        return f"{self._topic}${self._subscription}"

    async def token(self) -> str | None:
        """The token to send: the cached one, or a new one once the subscriber refused the cached one."""
        if not self._rejected:
            return self._token
        if self._refresh is None:
            self._refresh = asyncio.create_task(self._request(), name=f"oauth-{self.name}")
            self._refresh.add_done_callback(self._refreshed)
        return await asyncio.shield(self._refresh)

    def rejected(self, token: str | None) -> None:
        """A 401 to a send with ``token``; ignored when another send already brought a newer token."""
        if token == self._token:
            self._rejected = True

    def accepted(self) -> None:
        if self._delay is not None:
            self._delay.reset()

    def cancel(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()

    def _provider(self) -> OAuthProvider:
        provider = self._providers(self.policy.provider_name)
        if provider is None:
            raise OAuthTokenUnavailable(f"OAuth provider {self.policy.provider_name} does not exist")
        return provider

    async def _request(self) -> str:
        try:
            provider = self._provider()
            if self._delay is None:
                self._delay = TokenRequestDelay(
                    provider.token_request_initial_delay / 1000, provider.token_request_max_delay / 1000
                )
            wait = self._delay.wait(time.monotonic())
            if wait > 0:
                await asyncio.sleep(wait)
                provider = self._provider()
            self._delay.requested(time.monotonic())
            count_token_request(self._topic, self._subscription, failed=False)
            token = await self._client.request(provider, self.policy)
        except OAuthTokenUnavailable as exc:
            count_token_request(self._topic, self._subscription, failed=True)
            log.warning("no OAuth token for %s: %s", self.name, exc.message)
            raise
        self._token, self._rejected = token, False
        log.info("obtained an OAuth token for %s from provider %s", self.name, provider.name)
        return token

    def _refreshed(self, task: asyncio.Task[str]) -> None:
        self._refresh = None
        if not task.cancelled():
            task.exception()  # every waiter got it; nothing is left unretrieved


class OAuthTokens:
    """The tokens of every OAuth-secured subscription of this consumers node."""

    def __init__(self, client: TokenClient, providers: ProviderLookup) -> None:
        self._client = client
        self._providers = providers
        self._tokens: dict[str, SubscriptionToken] = {}

    def for_subscription(self, subscription: Subscription) -> SubscriptionToken | None:
        policy = subscription.oauth_policy
        if policy is None:
            return None
        key = subscription.qualified_name.qualified
        holder = self._tokens.get(key)
        if holder is None or holder.policy != policy:  # a changed policy starts over with its new credentials
            holder = self._tokens[key] = SubscriptionToken(subscription, policy, self._client, self._providers)
        return holder

    async def send(self, subscription: Subscription, headers: dict[str, str], post: Post) -> SendResult:
        """``post(headers)`` with the subscription's bearer token; a 401 marks the token for renewal."""
        holder = self.for_subscription(subscription)
        if holder is None:
            return await post(headers)
        try:
            token = await holder.token()
        except OAuthTokenUnavailable as exc:
            return SendResult.failure(f"no OAuth token: {exc.message}")
        if token is not None:
            headers = {**headers, "Authorization": f"Bearer {token}"}
        result = await post(headers)
        if result.status == 401:
            holder.rejected(token)
            return dataclasses.replace(result, reauthorize=True)
        if result.succeeded:
            holder.accepted()
        return result

    def provider_changed(self, name: str) -> None:
        """Drops the tokens of a created, updated or deleted provider: the next 401 asks it (again)."""
        dropped = [key for key, holder in self._tokens.items() if holder.policy.provider_name == name]
        for key in dropped:
            del self._tokens[key]
        if dropped:
            log.info("OAuth provider %s changed: dropped the tokens of %d subscriptions", name, len(dropped))

    async def subscription_changed(self, topic: TopicName, name: str, subscription: Subscription | None) -> None:
        if subscription is None:
            self._tokens.pop(SubscriptionName(topic, name).qualified, None)

    def close(self) -> None:
        for holder in self._tokens.values():
            holder.cancel()
        self._tokens.clear()

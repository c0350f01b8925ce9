"""Sending one message to a ``jms://`` endpoint: a queue or topic of a JMS broker, over STOMP with stomp.py.

STOMP rather than AMQP 1.0 (python-qpid-proton): every JMS broker we target speaks it (ActiveMQ, Artemis), the
client is pure Python, and a send confirmed by the broker's RECEIPT is all the protocol we need. Each message goes
persistent and asks for a receipt, which ActiveMQ gives once the message is stored: only then is it delivered
(at-least-once; a send the broker refuses, a connection lost or a receipt that does not come in the request
timeout is a failed attempt, retried like an HTTP subscriber's 5xx, network error or timeout).

One connection per broker and login, shared by the subscriptions that send there, opened at the first send and
again at the first send after it is lost. stomp.py is threaded: its socket writes run in a worker thread, and its
listener (on its receiver thread) hands receipts and errors to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

import stomp
from stomp.exception import StompException

from hermes.consumers.sender.result import SendResult
from hermes.domain.jms import JmsDestination, jms_destination, jms_properties
from hermes.domain.message import TOPIC_NAME_HEADER
from hermes.domain.subscription import Subscription
from hermes.errors import ValidationError
from hermes.http.streamed import Body

# stomp.py logs each failed connect and send, with a traceback: the failure log sums them up instead
logging.getLogger("stomp.py").setLevel(logging.CRITICAL)

HEARTBEAT_MS = 10_000  # both ways: a broker gone silent (half-open connection) is noticed within two of them
CONNECT_TIMEOUT = 5.0  # seconds, for the TCP connection and then for the broker's CONNECTED

Credentials = tuple[str, str] | None


class SendFailed(Exception):
    """The broker did not take a message: the reason, in words, without credentials."""


class BrokerConnection(stomp.ConnectionListener):  # type: ignore[misc]
    """One STOMP connection; each send waits on the event loop for its receipt."""

    def __init__(self, destination: JmsDestination, credentials: Credentials) -> None:
        self._loop = asyncio.get_running_loop()
        self._broker = destination.broker
        self._credentials = credentials
        self._receipts = itertools.count()
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._connected: asyncio.Future[None] = self._loop.create_future()
        self._connected.add_done_callback(_retrieved)
        self.lost = False
        self._stomp = stomp.Connection12(
            [(destination.host, destination.port)],
            prefer_localhost=False,
            try_loopback_connect=False,
            reconnect_attempts_max=1,  # a connection lost is opened again by the next attempt, not in the background
            timeout=CONNECT_TIMEOUT,
            heartbeats=(HEARTBEAT_MS, HEARTBEAT_MS),
            auto_decode=False,
        )
        self._stomp.set_listener("hermes", self)

    async def open(self) -> None:
        user, password = self._credentials or (None, None)
        try:
            await asyncio.to_thread(self._stomp.connect, user, password, wait=False)
        except Exception:
            self.lost = True
            raise SendFailed(f"cannot connect to the JMS broker at {self._broker}") from None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                await asyncio.shield(self._connected)
        except TimeoutError:
            self.close()
            raise SendFailed(f"the JMS broker at {self._broker} did not answer STOMP's CONNECT") from None

    async def send(self, destination: str, body: bytes, headers: dict[str, str]) -> None:
        """Returns once the broker confirms it has the message; SendFailed when it refuses it or is lost."""
        await asyncio.shield(self._connected)
        receipt = f"hermes-{next(self._receipts)}"
        confirmed = self._pending[receipt] = self._loop.create_future()
        frame = {**headers, "persistent": "true", "receipt": receipt}
        try:
            await asyncio.to_thread(self._stomp.send, destination, body, headers=frame)
            await confirmed
        except (OSError, StompException):
            self._lose(f"connection to the JMS broker at {self._broker} lost")
            raise SendFailed(f"connection to the JMS broker at {self._broker} lost") from None
        finally:
            self._pending.pop(receipt, None)

    def close(self) -> None:
        self.lost = True
        self._stomp.transport.disconnect_socket()

    # --- stomp.py's listener, called on its receiver thread ---

    def on_connected(self, frame: Any) -> None:
        self._on_loop(_settle, self._connected, None)

    def on_receipt(self, frame: Any) -> None:
        self._on_loop(self._settle_receipt, frame.headers.get("receipt-id"), None)

    def on_error(self, frame: Any) -> None:
        reason = frame.headers.get("message") or bytes(frame.body or b"").decode("utf-8", "replace")[:200]
        error = f"the JMS broker at {self._broker} refused: {reason.strip()}"
        if (receipt := frame.headers.get("receipt-id")) is not None:
            self._on_loop(self._settle_receipt, receipt, error)
        else:  # about the connection (a login refused): the broker closes it
            self._on_loop(self._lose, error)

    def on_disconnected(self) -> None:
        self._on_loop(self._lose, f"connection to the JMS broker at {self._broker} lost")

    def _on_loop(self, callback: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the process stops, nobody waits
            self._loop.call_soon_threadsafe(callback, *args)

    # --- on the event loop ---

    def _settle_receipt(self, receipt: str | None, error: str | None) -> None:
        if receipt is not None and (future := self._pending.get(receipt)) is not None:
            _settle(future, error)

    def _lose(self, error: str) -> None:
        self.lost = True
        _settle(self._connected, error)
        for future in self._pending.values():
            _settle(future, error)


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Marks a failure as seen: one that no send waited for is no error to report."""
    if not future.cancelled():
        future.exception()


def _settle(future: asyncio.Future[None], error: str | None) -> None:
    if not future.done():
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(SendFailed(error))


class JmsSender:
    def __init__(self) -> None:
        self._connections: dict[tuple[str, int, Credentials], BrokerConnection] = {}
        self._opening: dict[BrokerConnection, asyncio.Task[None]] = {}

    async def send(
        self, subscription: Subscription, url: str, body: Body, headers: dict[str, str], timeout_ms: int
    ) -> SendResult:
        """Sends to the endpoint's destination, with the endpoint's credentials as the broker login; the
        message's headers go as its properties (``hermes.domain.jms``), with the topic's name as Hermes sends it."""
        try:
            destination = jms_destination(url)
        except ValidationError as exc:  # an address from a resolver of one's own
            return SendResult.failure(exc.message)
        properties = jms_properties({**headers, TOPIC_NAME_HEADER: subscription.topic_name.qualified})
        data = body if isinstance(body, bytes) else await asyncio.to_thread(b"".join, body.chunks())
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                connection = await self._connection(destination, subscription.endpoint.credentials)
                await connection.send(destination.stomp, data, properties)
        except TimeoutError:
            return SendResult.timeout()
        except SendFailed as exc:
            return SendResult.failure(str(exc))
        return SendResult.delivered()

    async def _connection(self, destination: JmsDestination, credentials: Credentials) -> BrokerConnection:
        key = (destination.host, destination.port, credentials)
        connection = self._connections.get(key)
        if connection is None or connection.lost:
            if connection is not None:
                connection.close()
            connection = self._connections[key] = BrokerConnection(destination, credentials)
            task = self._opening[connection] = asyncio.create_task(connection.open())
            task.add_done_callback(_retrieved)
            task.add_done_callback(lambda _: self._opening.pop(connection, None))
        if (opening := self._opening.get(connection)) is not None:
            await asyncio.shield(opening)
        return connection

    async def close(self) -> None:
        for task in self._opening.values():
            task.cancel()
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(asyncio.to_thread(c.close) for c in connections), return_exceptions=True)

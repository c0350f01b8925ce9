"""The subscriber's side: reading a delivery (Hermes' headers, a BATCH's array), verifying its signature, and
answering with the statuses Hermes understands, as ASGI and WSGI apps around a function of one delivery.

What the answer means to Hermes (docs/subscribing.md): 2xx delivered; 4xx not retried unless the subscription has
``retryClientErrors`` (counted as delivered); 5xx retried; 503 or 429 with ``Retry-After`` retried after that many
seconds without slowing the subscription down."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from hermes.client.signatures import verify
from hermes.errors import InvalidSignature, ValidationError

log = logging.getLogger(__name__)

MESSAGE_ID = "hermes-message-id"
MESSAGE_IDS = "hermes-message-ids"
BATCH_ID = "hermes-batch-id"
RETRY_COUNT = "hermes-retry-count"
TOPIC_NAME = "hermes-topic-name"
SUBSCRIPTION_NAME = "hermes-subscription-name"
SCHEMA_VERSION = "schema-version"


@dataclass(frozen=True)
class Delivery:
    """One request from Hermes: a message (SERIAL) or a batch of them (BATCH). ``headers``: lower-case names."""

    headers: Mapping[str, str]
    body: bytes

    @property
    def message_id(self) -> str:
        """A SERIAL delivery's message id; a batch's id for a BATCH (the same on every retry)."""
        return self.headers.get(MESSAGE_ID) or self.headers.get(BATCH_ID, "")

    @property
    def is_batch(self) -> bool:
        return BATCH_ID in self.headers

    @property
    def message_ids(self) -> list[str]:
        """Every message's id, in body order (one for a SERIAL delivery)."""
        if not self.is_batch:
            return [self.message_id] if self.message_id else []
        return [part for part in self.headers.get(MESSAGE_IDS, "").split(",") if part]

    @property
    def retry_count(self) -> int:
        raw = self.headers.get(RETRY_COUNT, "0")
        return int(raw) if raw.isdigit() else 0

    @property
    def topic(self) -> str | None:
        """With the subscription's ``subscriptionIdentityHeadersEnabled``."""
        return self.headers.get(TOPIC_NAME)

    @property
    def subscription(self) -> str | None:
        return self.headers.get(SUBSCRIPTION_NAME)

    @property
    def schema_version(self) -> int | None:
        """An AVRO subscription's: the version of the binary body's schema."""
        raw = self.headers.get(SCHEMA_VERSION, "")
        return int(raw) if raw.isdigit() else None

    def json(self) -> Any:
        """The body as JSON (a BATCH's: the list of messages)."""
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise ValidationError(f"not JSON: {exc}", "body") from None

    def messages(self) -> list[Any]:
        """Each message as JSON: a BATCH's elements, or the one message."""
        value = self.json()
        if not self.is_batch:
            return [value]
        if not isinstance(value, list):
            raise ValidationError("a BATCH delivery's body must be a JSON array", "body")
        return value


@dataclass(frozen=True)
class Answer:
    """The HTTP answer to a delivery; the constructors below are the ones Hermes tells apart."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def ok(cls) -> Answer:
        return cls(200)

    @classmethod
    def retry_later(cls, seconds: int) -> Answer:
        """Back pressure: 503 with ``Retry-After``; retried after ``seconds``, the rate not lowered."""
        return cls(503, {"Retry-After": str(seconds)})

    @classmethod
    def too_many(cls, seconds: int | None = None) -> Answer:
        """429: slows the subscription down; retried (after ``seconds``) only with ``retryClientErrors``."""
        return cls(429, {"Retry-After": str(seconds)} if seconds is not None else {})

    @classmethod
    def reject(cls, status: int = 400) -> Answer:
        """A message this subscriber will never take: not retried (unless ``retryClientErrors``)."""
        return cls(status)

    @classmethod
    def stop(cls, status: int = 422) -> Answer:
        """A failure not worth retrying: ``Hermes-Retry: stop`` gives the message up at once where the subscription
        allows it (``stopRetryHeaderAllowed``); elsewhere ``status`` decides, as for ``reject``."""
        return cls(status, {"Hermes-Retry": "stop"})

    @classmethod
    def fail(cls) -> Answer:
        """Try again: 500, retried with back-off, and the subscription slows down."""
        return cls(500)


def read_delivery(headers: Iterable[tuple[str, str]], body: bytes, secrets: Sequence[str] = ()) -> Delivery:
    """The delivery; with ``secrets``, only a signed one (else ``InvalidSignature``)."""
    lower = {name.lower(): value for name, value in headers}
    if secrets:
        verify(secrets, lower, body)
    return Delivery(lower, body)


Handler = Callable[[Delivery], Answer | None]
AsyncHandler = Callable[[Delivery], Awaitable[Answer | None]]


def _refusal(error: Exception) -> Answer:
    """The answer to a delivery the handler could not take: a bad signature or body is refused (not retried), any
    other failure is a 500 (retried)."""
    if isinstance(error, InvalidSignature):
        return Answer.reject(401)
    if isinstance(error, ValidationError):
        return Answer.reject(400)
    log.error("the delivery handler failed; answering 500, Hermes retries", exc_info=error)
    return Answer.fail()


class WsgiSubscriber:
    """A WSGI app (Flask's ``app.wsgi_app``, gunicorn, ``wsgiref``) calling ``handler`` for each delivery. The
    handler answers an ``Answer`` (``None``: 200); an exception is a 500, which Hermes retries."""

    def __init__(self, handler: Handler, secrets: Sequence[str] = ()) -> None:
        self.handler = handler
        self.secrets = tuple(secrets)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        length = environ.get("CONTENT_LENGTH") or "0"
        body = environ["wsgi.input"].read(int(length)) if length.isdigit() else b""
        headers = [(key[5:].replace("_", "-"), value) for key, value in environ.items() if key.startswith("HTTP_")]
        headers.append(("content-type", environ.get("CONTENT_TYPE", "")))
        try:
            answer = self.handler(read_delivery(headers, body, self.secrets)) or Answer.ok()
        except Exception as exc:
            answer = _refusal(exc)
        start_response(f"{answer.status} {HTTPStatus(answer.status).phrase}", list(answer.headers.items()))
        return []


class AsgiSubscriber:
    """An ASGI app (mounted in Starlette or FastAPI, or run by uvicorn) awaiting ``handler`` for each delivery."""

    def __init__(self, handler: AsyncHandler, secrets: Sequence[str] = ()) -> None:
        self.handler = handler
        self.secrets = tuple(secrets)

    async def __call__(
        self,
        scope: dict[str, Any],
        receive: Callable[[], Awaitable[dict[str, Any]]],
        send: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            event = await receive()
            chunks.append(event.get("body", b""))
            if not event.get("more_body"):
                break
        headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in scope["headers"]]
        try:
            answer = await self.handler(read_delivery(headers, b"".join(chunks), self.secrets)) or Answer.ok()
        except Exception as exc:
            answer = _refusal(exc)
        raw = [(name.lower().encode(), value.encode()) for name, value in answer.headers.items()]
        await send({"type": "http.response.start", "status": answer.status, "headers": raw})
        await send({"type": "http.response.body", "body": b""})

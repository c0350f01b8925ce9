"""The client's pure logic: retries (a request is sent again only when the first cannot have taken effect, or when
twice is the same as once), errors, credentials, the ASGI subscriber. The transport is scripted (httpx's
MockTransport): no broker here; tests/e2e/test_client.py runs the client against one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from hermes import errors
from hermes.client import Connection, HermesClient, RetryPolicy
from hermes.client.responses import raise_for_error
from hermes.client.subscriber import Answer, AsgiSubscriber, Delivery

pytestmark = pytest.mark.unit

FAST = RetryPolicy(attempts=3, backoff=0.0, max_backoff=0.0)


def _client(outcomes: list[Callable[[httpx.Request], httpx.Response]], sent: list[httpx.Request]) -> HermesClient:
    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return outcomes[min(len(sent), len(outcomes)) - 1](request)

    return HermesClient(Connection(), FAST, httpx.MockTransport(handle))


def _raise(error: type[httpx.TransportError]) -> Callable[[httpx.Request], httpx.Response]:
    def fail(request: httpx.Request) -> httpx.Response:
        raise error("scripted", request=request)

    return fail


def _answer(status: int, **headers: str) -> Callable[[httpx.Request], httpx.Response]:
    return lambda _: httpx.Response(status, headers={"Hermes-Message-Id": "m1", **headers})


def test_a_publish_whose_answer_was_lost_is_not_sent_again() -> None:
    sent: list[httpx.Request] = []
    with _client([_raise(httpx.ReadTimeout), _answer(201)], sent) as client, pytest.raises(errors.ServiceUnavailable):
        client.publish("g.t", b"{}")
    assert len(sent) == 1


def test_a_publish_with_an_idempotency_key_is_sent_again_after_a_lost_answer() -> None:
    sent: list[httpx.Request] = []
    replayed = _answer(201, **{"Idempotent-Replayed": "true"})
    with _client([_raise(httpx.ReadTimeout), replayed], sent) as client:
        result = client.publish("g.t", b"{}", idempotency_key="order-42")
    assert result.message_id == "m1" and result.replayed
    assert [r.headers["Idempotency-Key"] for r in sent] == ["order-42", "order-42"]


def test_a_publish_that_never_connected_or_was_refused_is_sent_again() -> None:
    sent: list[httpx.Request] = []
    with _client([_raise(httpx.ConnectError), _answer(503, **{"Retry-After": "0"}), _answer(201)], sent) as client:
        assert client.publish("g.t", b"{}").message_id == "m1"
    assert len(sent) == 3


def test_a_read_of_management_is_retried_after_a_lost_answer_but_not_forever() -> None:
    sent: list[httpx.Request] = []
    with _client([_raise(httpx.ReadTimeout)], sent) as client, pytest.raises(errors.ServiceUnavailable):
        client.topics()
    assert len(sent) == FAST.attempts


def test_a_server_error_is_not_retried_and_keeps_its_status() -> None:
    sent: list[httpx.Request] = []
    with _client([_answer(500)], sent) as client, pytest.raises(errors.HermesError) as error:
        client.publish("g.t", b"{}")
    assert (len(sent), error.value.status) == (1, 500)


def test_the_asgi_subscriber_answers_hermes_statuses() -> None:
    def run(handler: Callable[[Delivery], Answer | None], body: bytes) -> tuple[int, dict[bytes, bytes]]:
        async def handle(delivery: Delivery) -> Answer | None:
            return handler(delivery)

        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            return {"type": "http.request", "body": body}

        async def send(event: dict[str, object]) -> None:
            sent.append(event)

        scope = {"type": "http", "headers": [(b"hermes-message-id", b"m1"), (b"hermes-retry-count", b"2")]}
        asyncio.run(AsgiSubscriber(handle)(scope, receive, send))  # type: ignore[arg-type]
        return sent[0]["status"], dict(sent[0]["headers"])  # type: ignore[call-overload, return-value]

    seen: list[Delivery] = []
    assert run(seen.append, b'{"a": 1}')[0] == 200
    assert (seen[0].message_id, seen[0].retry_count, seen[0].messages()) == ("m1", 2, [{"a": 1}])
    assert run(lambda _: Answer.retry_later(7), b"{}") == (503, {b"retry-after": b"7"})
    assert run(lambda _: Answer.stop(), b"{}") == (422, {b"hermes-retry": b"stop"})
    assert run(lambda d: d.json(), b"not json")[0] == 400
    assert run(lambda _: 1 / 0, b"{}")[0] == 500  # type: ignore[func-returns-value]


def test_credentials_go_in_the_authorization_header_and_never_in_the_repr() -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization", ""))
        return httpx.Response(200, json=[])

    for connection in (Connection(user="alice", password="s3cret"), Connection(user="alice", token="t0ken")):
        with HermesClient(connection, FAST, httpx.MockTransport(handle)) as client:
            client.topics()
        assert "s3cret" not in repr(connection) and "t0ken" not in repr(connection)
    assert seen == ["Basic YWxpY2U6czNjcmV0", "Bearer t0ken"]


def _subclasses(cls: type[errors.HermesError]) -> list[type[errors.HermesError]]:
    """The error types with a code of their own (a subclass that keeps its parent's code reads back as the
    parent: the wire does not tell them apart)."""
    children = [sub for child in cls.__subclasses__() for sub in _subclasses(child)]
    # the client reads the codes of hermes.errors; a role's own error types (e.g. management's) are not its
    return [cls, *(sub for sub in children if sub.code != cls.code and sub.__module__ == "hermes.errors")]


@pytest.mark.parametrize("error", _subclasses(errors.HermesError), ids=lambda cls: cls.__name__)
def test_every_error_code_reads_back_as_its_type_with_the_apis_message(error: type[errors.HermesError]) -> None:
    body = f'{{"code": "{error.code}", "message": "said the API"}}'.encode()
    with pytest.raises(errors.HermesError) as raised:
        raise_for_error(error.status, {}, body, "/x")
    assert type(raised.value) is error and raised.value.message == "said the API"

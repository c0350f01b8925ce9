"""Hostile and careless clients against a running Hermes, with short edge limits: huge headers, trickled headers,
bodies promised and never sent, half-open connections, made-up huge ids, clients that go away. Every request gets
an answer within its deadline, an honest client's publish goes on meanwhile, and nothing is logged above DEBUG
for what clients are expected to do."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from tests.integration.test_publishing import AVRO_SCHEMA
from tests.support.hermes import HermesClient, InProcessHermes

pytestmark = pytest.mark.integration

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
TICK = 0.25  # EdgeLimits.tick for these limits
HUGE = str(2**63)  # beyond any signed 64-bit integer


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {
        "http_header_timeout": HEADER_TIMEOUT,
        "http_body_timeout": BODY_TIMEOUT,
        "http_keepalive_timeout": 2.0,
        "http_max_connections": 64,
    }


@pytest.fixture
def topic(client: HermesClient) -> str:
    return client.create_topic()


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


async def _answer_of(url: str, *pieces: bytes, pause: float = 0.0) -> tuple[bytes, float]:
    """Sends the pieces (``pause`` seconds apart, the connection then left open) until the answer comes: its
    status line and the seconds it took from the first piece."""
    reader, writer = await asyncio.open_connection(*_address(url))
    started = time.monotonic()
    answer = asyncio.create_task(reader.readline())
    try:
        for piece in pieces:
            if answer.done():
                break
            writer.write(piece)
            await asyncio.sleep(pause)
        return (await asyncio.wait_for(answer, 30)).rstrip(), time.monotonic() - started
    finally:
        writer.close()


def _publish_meanwhile(client: HermesClient, topic: str, hostile: Any) -> tuple[Any, float]:
    """Runs the hostile coroutine in a thread of its own while this one publishes honestly; the hostile outcome
    and the slowest honest publish's seconds."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(asyncio.run(hostile)))
    thread.start()
    slowest = 0.0
    while thread.is_alive():
        started = time.monotonic()
        assert client.publish(topic, '{"honest": true}').status_code in (201, 202)
        slowest = max(slowest, time.monotonic() - started)
    thread.join()
    return outcome[0], slowest


def test_a_huge_header_is_refused_early_and_an_honest_publish_goes_on(
    hermes: InProcessHermes, client: HermesClient, topic: str
) -> None:
    async def huge_header() -> tuple[bytes, float]:
        reader, writer = await asyncio.open_connection(*_address(hermes.frontend_url))
        writer.write(f"POST /topics/{topic} HTTP/1.1\r\nHost: h\r\nX-Big: ".encode())
        started = time.monotonic()
        answer = asyncio.create_task(reader.readline())
        sent = 0
        try:  # 100 MB, as the report's, unless the server answers first
            while sent < 100 << 20 and not answer.done():
                writer.write(b"a" * (1 << 20))
                await writer.drain()
                sent += 1 << 20
        except ConnectionError:
            pass
        status = await asyncio.wait_for(answer, 30)
        writer.close()
        return status.rstrip(), time.monotonic() - started

    (status, took), slowest = _publish_meanwhile(client, topic, huge_header())
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert took < 1.0
    assert slowest < 1.0


def test_trickled_headers_get_a_408_at_the_deadline_and_an_honest_publish_goes_on(
    hermes: InProcessHermes, client: HermesClient, topic: str
) -> None:
    head = f"POST /topics/{topic} HTTP/1.1\r\nHost: h\r\nX-Slow: {'s' * 100}".encode()
    trickle = _answer_of(hermes.frontend_url, *(bytes([b]) for b in head), pause=0.05)
    (status, took), slowest = _publish_meanwhile(client, topic, trickle)
    assert status == b"HTTP/1.1 408 Request Timeout"
    assert took < HEADER_TIMEOUT + 2 * TICK + 1.0
    assert slowest < 1.0


@pytest.mark.parametrize("port", ["frontend", "management"])
def test_every_port_answers_slow_and_silent_clients_within_its_deadlines(
    hermes: InProcessHermes, topic: str, port: str
) -> None:
    url, path = (hermes.frontend_url, f"/topics/{topic}") if port == "frontend" else (hermes.management_url, "/groups")
    promised = f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"

    async def clients() -> list[tuple[bytes, float]]:
        return list(
            await asyncio.gather(
                _answer_of(url, promised.encode()),  # a body promised and never sent
                _answer_of(url, f"GET {path} HTTP/1.1\r\nHost: h\r\n".encode()),  # headers never finished
                _answer_of(url, b"G", pause=0.2),  # one byte, then nothing
            )
        )

    body, head, byte = asyncio.run(clients())
    assert body[0] == b"HTTP/1.1 408 Request Timeout"
    assert body[1] < BODY_TIMEOUT + 2 * TICK + 1.0
    for status, took in (head, byte):
        assert status == b"HTTP/1.1 408 Request Timeout"
        assert took < HEADER_TIMEOUT + 2 * TICK + 1.0


@pytest.mark.parametrize("port", ["frontend", "management"])
def test_idle_and_half_open_connections_are_closed(hermes: InProcessHermes, port: str) -> None:
    address = _address(hermes.frontend_url if port == "frontend" else hermes.management_url)

    async def connections() -> tuple[float, float]:
        idle_reader, idle = await asyncio.open_connection(*address)
        half_reader, half = await asyncio.open_connection(*address)
        half.write(b"GET /status/health HTTP/1.1\r\nHost: h\r\n")
        half.write_eof()  # the client is done sending, and never finishes its request
        started = time.monotonic()
        await asyncio.wait_for(half_reader.read(), 30)
        half_open = time.monotonic() - started
        await asyncio.wait_for(idle_reader.read(), 30)
        never_sent = time.monotonic() - started
        idle.close()
        half.close()
        return half_open, never_sent

    half_open, never_sent = asyncio.run(connections())
    assert half_open < HEADER_TIMEOUT + 2 * TICK + 1.0
    assert never_sent < HEADER_TIMEOUT + 2 * TICK + 1.0


def test_a_huge_schema_version_or_id_is_a_400_naming_the_header(client: HermesClient) -> None:
    topic = client.create_topic(contentType="AVRO", schema=orjson.dumps(AVRO_SCHEMA).decode())
    record = b'{"name": "a", "age": 1, "addresses": []}'
    for header in ("Schema-Version", "Schema-Id"):
        response = client.publish(topic, record, {header: HUGE})
        assert response.status_code == 400, response.text
        assert response.json()["message"].startswith(f"{header}: ")
    for path in ("versions", "ids"):
        response = client.management.get(f"/topics/{topic}/schema/{path}/{HUGE}")
        assert response.status_code == 400, response.text
        assert response.json()["message"].startswith(("version: ", "id: "))


def test_a_retransmission_date_before_1970_is_a_400_naming_the_field(client: HermesClient, topic: str) -> None:
    subscription = client.create_subscription(topic, "http://127.0.0.1:1/")
    path = f"/topics/{topic}/subscriptions/{subscription}/retransmission"
    for date in ("1969-12-31T23:59:59Z", "0001-01-01T00:00:00", "-99999999999d"):
        for params in ({}, {"dryRun": "true"}):
            response = client.management.put(path, params=params, json={"retransmissionDate": date})
            assert response.status_code == 400, (date, response.text)
            assert response.json()["message"].startswith("retransmissionDate: ")


def test_topics_query_takes_post_alone(client: HermesClient) -> None:
    for method in ("PUT", "GET", "DELETE", "OPTIONS"):
        response = client.management.request(method, "/topics/query")
        assert response.status_code == 405, (method, response.text)
        assert response.headers["allow"] == "POST"
    assert client.management.post("/topics/query", json={"query": {}}).status_code == 200


def test_clients_that_go_away_mid_request_log_nothing_above_debug(
    hermes: InProcessHermes, client: HermesClient, topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    body = b'{"groupName": "gone"}'
    probes = [
        b"POST /groups HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        b"POST /groups HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body),  # whole, and gone before the answer
        f"GET /topics/{topic} HTTP/1.1\r\nHost: h\r\n".encode(),
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # TLS on the plain port
        b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n",
        b"POST /groups HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
    ]
    for url in (hermes.management_url, hermes.frontend_url):
        for probe in probes:
            with socket.create_connection(_address(url)) as sock:
                sock.sendall(probe)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # a reset
    with httpx.Client(base_url=hermes.management_url) as management:  # after the probes were handled
        assert management.get("/groups").status_code == 200
    client.management.delete("/groups/gone")
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [(r.name, r.getMessage()) for r in loud]

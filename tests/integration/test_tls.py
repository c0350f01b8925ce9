"""HTTPS: the publishing and management ports with a certificate made in the test, and deliveries to an HTTPS
subscriber whose certificate is verified against --consumer-tls-ca-file."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes.errors import StartupError
from hermes.http.client import HttpClient
from hermes.security.tls import client_context, server_context
from tests.support.hermes import InProcessHermes, unique
from tests.support.subscriber import SubscriberServer
from tests.support.tls import ThrowawayCA
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> ThrowawayCA:
    return ThrowawayCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def hermes_overrides(authority: ThrowawayCA) -> dict[str, Any]:
    server = authority.issue("hermes")
    return {"tls_cert_file": server.cert, "tls_key_file": server.key, "consumer_tls_ca_file": authority.ca_file}


@pytest.fixture(scope="module")
def https_subscriber(authority: ThrowawayCA) -> Iterator[SubscriberServer]:
    server = SubscriberServer(tls=authority.issue("subscriber").context()).start()
    yield server
    server.stop()


def deliver_over_https(hermes: InProcessHermes, authority: ThrowawayCA, endpoint: str) -> tuple[str, httpx.Response]:
    """A topic with a subscription to ``endpoint`` and a message published to it, all over HTTPS."""
    trusted = ssl.create_default_context(cafile=authority.ca_file)
    with (
        httpx.Client(base_url=hermes.management_url, verify=trusted, timeout=30) as management,
        httpx.Client(base_url=hermes.frontend_url, verify=trusted, timeout=30) as frontend,
    ):
        group = unique("g")
        assert management.post("/groups", json={"groupName": group}).status_code == 201
        topic = f"{group}.{unique('topic')}"
        owner = {"source": "Plaintext", "id": "tests"}
        body = {"name": topic, "description": "tls", "owner": owner, "contentType": "JSON"}
        assert management.post("/topics", json=body).status_code == 201
        subscription = {"topicName": topic, "name": "s", "endpoint": endpoint, "owner": owner}
        subscription["description"] = "an https subscriber"
        assert management.post(f"/topics/{topic}/subscriptions", json=subscription).status_code == 201
        response = frontend.post(f"/topics/{topic}", content=b'{"over": "tls"}')
        assert response.status_code in (201, 202), response.text
        return topic, response


def test_the_console_calls_its_apis_over_https(hermes: InProcessHermes, authority: ThrowawayCA) -> None:
    """The console trusts the listeners' own certificate for its calls to its own port and the frontend's."""
    topic, _ = deliver_over_https(hermes, authority, "https://127.0.0.1:9/")
    trusted = ssl.create_default_context(cafile=authority.ca_file)
    with httpx.Client(base_url=hermes.management_url + "/ui", verify=trusted, timeout=30) as console:
        page = console.get(f"/topics/{topic}")
        assert page.status_code == 200 and f"Topic {topic}" in page.text, page.text
        published = console.post(f"/topics/{topic}/publish", data={"body": '{"from": "the console"}'})
        assert "Published: Hermes-Message-Id" in published.text, published.text


def test_publishing_and_management_speak_https_and_deliver_to_an_https_subscriber(
    hermes: InProcessHermes, authority: ThrowawayCA, https_subscriber: SubscriberServer
) -> None:
    assert hermes.management_url.startswith("https://") and hermes.frontend_url.startswith("https://")
    _, response = deliver_over_https(hermes, authority, https_subscriber.url)
    delivered = https_subscriber.wait_for(1, timeout=30)
    assert delivered[0].body == b'{"over": "tls"}'
    assert delivered[0].message_id == response.headers["Hermes-Message-Id"]
    for url in (hermes.frontend_url, hermes.management_url):
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # a client without the CA
            httpx.get(f"{url}/status/health", timeout=10)
        with pytest.raises(httpx.HTTPError):  # plain HTTP on a TLS port is not answered
            httpx.get(url.replace("https://", "http://") + "/status/health", timeout=10)


def test_no_delivery_reaches_a_subscriber_whose_certificate_no_trusted_ca_signed(
    hermes: InProcessHermes,
    authority: ThrowawayCA,
    tmp_path_factory: pytest.TempPathFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Hermes has no per-subscription opt-out (docs/security.md): verification is never skipped."""
    caplog.set_level(logging.INFO, "hermes.consumers.failure_log")
    stranger = ThrowawayCA(tmp_path_factory.mktemp("stranger"), "A CA nobody trusts")
    subscriber = SubscriberServer(tls=stranger.issue("subscriber").context()).start()
    try:
        topic, _ = deliver_over_https(hermes, authority, subscriber.url)
        refused = f"delivery to {topic}$s failing"
        wait_until(lambda: refused in caplog.text and "TLS certificate of 127.0.0.1 is not trusted" in caplog.text, 30)
        assert subscriber.received == []
    finally:
        subscriber.stop()


def test_the_subscribers_certificate_is_verified(
    authority: ThrowawayCA, https_subscriber: SubscriberServer, tmp_path: Path
) -> None:
    async def post(context: ssl.SSLContext) -> int:
        client = HttpClient(context)
        try:
            return (await client.post(https_subscriber.url, b"{}", {}, total=10)).status
        finally:
            await client.close()
            await asyncio.sleep(0.01)  # a refused handshake's transport closes in a callback: let it run

    assert asyncio.run(post(client_context(authority.ca_file))) == 200
    with pytest.raises(ssl.SSLCertVerificationError):  # the system's CAs alone do not know the test CA
        asyncio.run(post(client_context(None)))
    (tmp_path / "not-a-ca.pem").write_text("nothing here")
    with pytest.raises(StartupError, match=r"not-a-ca\.pem"):
        client_context(tmp_path / "not-a-ca.pem")


def test_a_listener_certificate_needs_its_key(authority: ThrowawayCA, tmp_path: Path) -> None:
    files = authority.issue("alone")
    assert server_context(None, None) is None
    with pytest.raises(StartupError, match="go together"):
        server_context(files.cert, None)
    with pytest.raises(StartupError, match="cannot be loaded"):
        server_context(files.cert, authority.ca_file)

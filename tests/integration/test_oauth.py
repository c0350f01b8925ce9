"""OAuth 2 towards subscribers: a real token endpoint, a real subscriber demanding its tokens, real Hermes."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from hermes.broker.embedded import EmbeddedBroker, free_port
from tests.conftest import wait_until
from tests.support.hermes import HermesClient, HermesProcess, InProcessHermes, unique
from tests.support.oauth import OAuthServer
from tests.support.subscriber import Reply

pytestmark = pytest.mark.integration

CLIENT_ID, CLIENT_SECRET = "hermes-client", "client-secret-d41f"
USER, USER_PASSWORD = "alice", "owner-password-9c2e"
# requestTimeout is generous: under load a slow answer would add retries the counts do not expect
POLICY = {"messageBackoff": 50, "messageTtl": 60, "requestTimeout": 10_000, "retryClientErrors": False}


@pytest.fixture
def oauth(caplog: pytest.LogCaptureFixture) -> Iterator[OAuthServer]:
    caplog.set_level(logging.DEBUG)
    server = OAuthServer({CLIENT_ID: CLIENT_SECRET, "hermes-2": "second-secret-77aa"}, {USER: USER_PASSWORD})
    server.start()
    yield server
    server.stop()
    logged = caplog.text
    for secret in (CLIENT_SECRET, "second-secret-77aa", USER_PASSWORD, *server.issued):
        assert secret not in logged, "a secret or a token was logged"


def create_provider(client: HermesClient, token_url: str, secret: str = CLIENT_SECRET, **fields: Any) -> str:
    name = unique("provider")
    body = {
        "name": name,
        "tokenEndpoint": token_url,
        "clientId": CLIENT_ID,
        "clientSecret": secret,
        "tokenRequestInitialDelay": 100,
        "tokenRequestMaxDelay": 1000,
        "requestTimeout": 5000,
        **fields,
    }
    response = client.management.post("/oauth/providers", json=body)
    assert response.status_code == 201, response.text
    return name


def secured(
    client: HermesClient, server: OAuthServer, provider: str, grant: str = "clientCredentials", **fields: Any
) -> tuple[str, str]:
    topic = client.create_topic()
    policy: dict[str, Any] = {"grantType": grant, "providerName": provider, "scope": "events:write"}
    if grant == "password":
        policy |= {"username": USER, "password": USER_PASSWORD}
    fields.setdefault("subscriptionPolicy", POLICY)
    name = client.create_subscription(topic, server.subscriber.url, oAuthPolicy=policy, **fields)
    return topic, name


def counter(name: str, topic: str, subscription: str) -> float:
    value = REGISTRY.get_sample_value(
        f"hermes_consumers_oauth_{name}_total", {"topic": topic, "subscription": subscription}
    )
    return value or 0.0


def test_client_credentials_grant(client: HermesClient, oauth: OAuthServer) -> None:
    topic, name = secured(client, oauth, create_provider(client, oauth.token_url))
    message_id = client.publish(topic, '{"n": 1}').headers["Hermes-Message-Id"]
    first, second = oauth.subscriber.wait_for(2, timeout=20)
    assert "Authorization" not in first.headers, "the first send has no token yet"
    [request] = oauth.requests
    assert request.content_type.startswith("application/x-www-form-urlencoded")
    assert request.form == {
        "grant_type": "client_credentials",
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "scope": "events:write",
    }
    assert second.headers["Authorization"] == f"Bearer {request.token}"
    assert second.message_id == message_id and second.headers["Hermes-Retry-Count"] == "1"
    assert oauth.delivered() == [second], "the 401 was retried although retryClientErrors is false"
    assert counter("token_requests", topic, name) == 1 and counter("token_failures", topic, name) == 0


def test_password_grant(client: HermesClient, oauth: OAuthServer) -> None:
    topic, _ = secured(client, oauth, create_provider(client, oauth.token_url), grant="password")
    client.publish(topic, '{"n": 1}')
    wait_until(lambda: len(oauth.delivered()) == 1, timeout=20)
    [request] = oauth.requests
    assert request.form == {
        "grant_type": "password",
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
        "username": USER,
        "password": USER_PASSWORD,
        "scope": "events:write",
    }


def test_one_token_request_for_many_concurrent_messages(client: HermesClient, oauth: OAuthServer) -> None:
    oauth.token_delay = 1.5  # the messages published meanwhile all need the token while it is requested
    topic, _ = secured(client, oauth, create_provider(client, oauth.token_url))
    ids = {client.publish(topic, f'{{"n": {i}}}').headers["Hermes-Message-Id"] for i in range(40)}
    wait_until(lambda: {r.message_id for r in oauth.delivered()} == ids, timeout=30)
    assert len(oauth.requests) == 1, "the sends share one token request"
    # after the first 401 the other messages wait for the token instead of being sent without one
    refused = [r for r in oauth.subscriber.received if "Authorization" not in r.headers]
    assert 1 <= len(refused) < len(ids)
    assert len(oauth.subscriber.received) == len(refused) + len(ids), "each message delivered once"
    assert {r.headers["Authorization"] for r in oauth.delivered()} == {f"Bearer {oauth.issued[0]}"}


def test_an_expired_token_is_replaced_on_the_next_401(client: HermesClient, oauth: OAuthServer) -> None:
    oauth.lifetime = 1.5  # long enough for the first message even on a loaded machine
    topic, _ = secured(client, oauth, create_provider(client, oauth.token_url))
    client.publish(topic, '{"n": 1}')
    wait_until(lambda: len(oauth.delivered()) == 1, timeout=20)
    first_token = oauth.issued[0]
    expired_at = oauth.requests[0].at + oauth.lifetime
    wait_until(lambda: time.monotonic() > expired_at + 0.05)
    client.publish(topic, '{"n": 2}')
    wait_until(lambda: len(oauth.delivered()) == 2, timeout=20)
    assert len(oauth.issued) == 2 and oauth.issued[1] != first_token
    rejected = [r for r in oauth.subscriber.received if r.headers.get("Authorization") == f"Bearer {first_token}"]
    assert len(rejected) == 2 and orjson.loads(rejected[-1].body) == {"n": 2}, "sent with the expired token first"
    assert oauth.delivered()[-1].headers["Authorization"] == f"Bearer {oauth.issued[1]}"


def test_token_requests_are_spaced_by_a_growing_delay(client: HermesClient, oauth: OAuthServer) -> None:
    oauth.accept_from = 10**6  # the subscriber answers 401 whatever token it gets
    provider = create_provider(client, oauth.token_url, tokenRequestInitialDelay=200, tokenRequestMaxDelay=800)
    topic, name = secured(client, oauth, provider)
    try:
        client.publish(topic, '{"n": 1}')
        wait_until(lambda: len(oauth.requests) >= 6, timeout=30)
        times = [r.at for r in oauth.requests[:6]]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        delays = (0.2, 0.4, 0.8, 0.8, 0.8)
        # The delay runs from when the broker sent the request before; these are arrivals at the token server, so a
        # request that arrived late (a busy machine: over 0.1 s) shortens the gap after it by as much. In all, the
        # gaps are the delays but for the lateness of the first request alone (without the doubling: 1 s).
        assert times[-1] - times[0] >= sum(delays) - 0.3, gaps
        assert max(gaps[3:]) < 1.5, f"the delay stops growing at tokenRequestMaxDelay: {gaps}"
        assert counter("token_requests", topic, name) >= 6
    finally:
        client.management.delete(f"/topics/{topic}/subscriptions/{name}")


def test_the_delay_falls_back_after_a_2xx(client: HermesClient, oauth: OAuthServer) -> None:
    oauth.accept_from = 5  # tokens 1-4 are refused: delays 0.2, 0.4, 0.8, 1.6 s; without a reset the next is 3.2 s
    provider = create_provider(client, oauth.token_url, tokenRequestInitialDelay=200, tokenRequestMaxDelay=10_000)
    topic, _ = secured(client, oauth, provider)
    client.publish(topic, '{"n": 1}')
    wait_until(lambda: len(oauth.delivered()) == 1, timeout=30)
    assert len(oauth.requests) == 5
    oauth.revoke()
    wait_until(lambda: time.monotonic() > oauth.requests[-1].at + 0.3)
    client.publish(topic, '{"n": 2}')
    wait_until(lambda: len(oauth.delivered()) == 2, timeout=30)
    last_accepted = f"Bearer {oauth.issued[4]}"
    refused = next(r for r in reversed(oauth.subscriber.received) if r.headers.get("Authorization") == last_accepted)
    assert oauth.requests[5].at - refused.at < 1.5, "after a 2xx the next token request waits the initial delay"


def test_batch_subscription(client: HermesClient, oauth: OAuthServer) -> None:
    topic, _ = secured(
        client,
        oauth,
        create_provider(client, oauth.token_url),
        deliveryType="BATCH",
        subscriptionPolicy={"batchSize": 3, "batchTime": 60_000, "messageBackoff": 50, "requestTimeout": 10_000},
    )
    for i in range(3):
        client.publish(topic, f'{{"n": {i}}}', headers={"Partition-Key": "one"})
    first, second = oauth.subscriber.wait_for(2, timeout=20)
    assert "Authorization" not in first.headers
    assert second.headers["Authorization"] == f"Bearer {oauth.issued[0]}"
    assert second.headers["Hermes-Batch-Id"] == first.headers["Hermes-Batch-Id"]
    assert orjson.loads(second.body) == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert oauth.delivered() == [second] and len(oauth.requests) == 1


@pytest.mark.parametrize(
    ("failure", "logged"),
    [
        ("down", "failed: connection refused by 127.0.0.1:"),
        ("status 500", "answered 500"),
        ("bad credentials", "answered 401 (invalid_client)"),
        ("garbage", "answered 200 without a JSON object"),
        ("no token", "answered 200 without a valid access_token"),
    ],
)
def test_token_endpoint_failures(
    client: HermesClient, oauth: OAuthServer, caplog: pytest.LogCaptureFixture, failure: str, logged: str
) -> None:
    url = f"http://127.0.0.1:{free_port()}/token" if failure == "down" else oauth.token_url
    secret = "wrong-secret-0b1d" if failure == "bad credentials" else CLIENT_SECRET
    oauth.override = {
        "status 500": Reply(500, body=b'{"error": "server_error"}'),
        "garbage": Reply(200, body=b"<html>not json</html>"),
        "no token": Reply(200, body=b'{"token_type": "bearer"}'),
    }.get(failure)
    provider = create_provider(client, url, secret=secret)
    topic, name = secured(client, oauth, provider)
    client.publish(topic, '{"n": 1}')
    wait_until(lambda: counter("token_failures", topic, name) >= 2, timeout=20)
    assert f"no OAuth token for {topic}${name}: the token endpoint of provider {provider} {logged}" in caplog.text
    assert oauth.delivered() == [] and all("Authorization" not in r.headers for r in oauth.subscriber.received)

    # the administrator fixes the provider: it takes effect without a restart
    oauth.override = None
    fixed = {"tokenEndpoint": oauth.token_url, "clientSecret": CLIENT_SECRET}
    assert client.management.put(f"/oauth/providers/{provider}", json=fixed).status_code == 200
    wait_until(lambda: len(oauth.delivered()) == 1, timeout=20)
    assert "wrong-secret-0b1d" not in caplog.text


def test_an_updated_provider_drops_its_cached_tokens(
    client: HermesClient, hermes: InProcessHermes, oauth: OAuthServer
) -> None:
    provider = create_provider(client, oauth.token_url)
    topic, _ = secured(client, oauth, provider)
    client.publish(topic, '{"n": 1}')
    wait_until(lambda: len(oauth.delivered()) == 1, timeout=20)
    change = {"clientId": "hermes-2", "clientSecret": "second-secret-77aa"}
    assert client.management.put(f"/oauth/providers/{provider}", json=change).status_code == 200
    cache = hermes.hermes.cache
    assert cache is not None
    wait_until(lambda: cache.oauth_providers[provider].client_id == "hermes-2")
    client.publish(topic, '{"n": 2}')
    wait_until(lambda: len(oauth.delivered()) == 2, timeout=20)
    assert [r.form["client_id"] for r in oauth.requests] == [CLIENT_ID, "hermes-2"], "the old token was dropped"


def test_a_deleted_provider(
    client: HermesClient, hermes: InProcessHermes, oauth: OAuthServer, caplog: pytest.LogCaptureFixture
) -> None:
    provider = create_provider(client, oauth.token_url)
    topic, name = secured(client, oauth, provider)
    client.publish(topic, '{"n": 1}')
    wait_until(lambda: len(oauth.delivered()) == 1, timeout=20)
    assert client.management.delete(f"/oauth/providers/{provider}").status_code == 200
    cache = hermes.hermes.cache
    assert cache is not None
    wait_until(lambda: provider not in cache.oauth_providers)
    client.publish(topic, '{"n": 2}')
    wait_until(lambda: counter("token_failures", topic, name) >= 2, timeout=20)
    assert f"no OAuth token for {topic}${name}: OAuth provider {provider} does not exist" in caplog.text
    assert len(oauth.delivered()) == 1 and len(oauth.requests) == 1
    recreated = {
        "name": provider,
        "tokenEndpoint": oauth.token_url,
        "clientId": CLIENT_ID,
        "clientSecret": CLIENT_SECRET,
    }
    assert client.management.post("/oauth/providers", json=recreated).status_code == 201
    wait_until(lambda: len(oauth.delivered()) == 2, timeout=20)


def test_secrets_never_appear_in_api_responses(client: HermesClient, oauth: OAuthServer) -> None:
    provider = create_provider(client, oauth.token_url)
    topic, name = secured(client, oauth, provider, grant="password")
    shown = [
        client.management.get(f"/oauth/providers/{provider}").text,
        client.management.get(f"/topics/{topic}/subscriptions/{name}").text,
        client.management.get(f"/topics/{topic}/subscriptions").text,
    ]
    client.publish(topic, '{"n": 1}')
    wait_until(lambda: len(oauth.delivered()) == 1, timeout=20)
    shown.append(client.management.get(f"/topics/{topic}/subscriptions/{name}/metrics").text)
    for text in shown:
        for secret in (CLIENT_SECRET, USER_PASSWORD, oauth.issued[0]):
            assert secret not in text
    assert orjson.loads(shown[0])["clientSecret"] == "******"
    assert orjson.loads(shown[1])["oAuthPolicy"]["password"] == "******"


def test_the_log_of_a_hermes_process_holds_no_secret(kafka: EmbeddedBroker, tmp_path: Path) -> None:
    server = OAuthServer({CLIENT_ID: CLIENT_SECRET}, {USER: USER_PASSWORD}).start()
    process = HermesProcess(
        tmp_path,
        "--kafka-bootstrap-servers",
        kafka.bootstrap_servers,
        "--metadata-poll-interval",
        "0.05",
        "--log-level",
        "DEBUG",
    ).start()
    client = HermesClient(process.management_url, process.frontend_url)
    try:
        provider = create_provider(client, server.token_url, secret="wrong-secret-0b1d")
        topic, name = secured(client, server, provider, grant="password")
        client.publish(topic, '{"n": 1}')
        wait_until(lambda: "no OAuth token for" in process.log(), timeout=30)
        fixed = {"clientSecret": CLIENT_SECRET}
        assert client.management.put(f"/oauth/providers/{provider}", json=fixed).status_code == 200
        wait_until(lambda: len(server.delivered()) == 1, timeout=30)
        labels = f'subscription="{name}",topic="{topic}"'
        counted = [
            f"hermes_consumers_oauth_token_requests_total{{{labels}}} 2.0",
            f"hermes_consumers_oauth_token_failures_total{{{labels}}} 1.0",
        ]
        prometheus = ""

        def scraped() -> bool:  # the consumers report their figures every metrics interval, not at each delivery
            nonlocal prometheus
            prometheus = client.management.get("/status/prometheus").text
            return all(line in prometheus for line in counted)

        wait_until(scraped, timeout=30)
    finally:
        client.close()
        process.stop()
        server.stop()
    log = process.log()
    assert f"obtained an OAuth token for {topic}${name} from provider {provider}" in log
    assert f"the token endpoint of provider {provider} answered 401 (invalid_client)" in log
    for secret in (CLIENT_SECRET, "wrong-secret-0b1d", USER_PASSWORD, *server.issued):
        assert secret not in log and secret not in prometheus


def test_a_policy_sent_back_with_the_masked_password_keeps_the_password(
    client: HermesClient, oauth: OAuthServer
) -> None:
    topic, name = secured(client, oauth, create_provider(client, oauth.token_url), grant="password")
    client.publish(topic, '{"n": 1}')
    wait_until(lambda: len(oauth.delivered()) == 1, timeout=20)
    shown = client.management.get(f"/topics/{topic}/subscriptions/{name}").json()["oAuthPolicy"]
    assert shown["password"] == "******"
    changed = client.management.put(
        f"/topics/{topic}/subscriptions/{name}", json={"oAuthPolicy": {**shown, "scope": "events:other"}}
    )
    assert changed.status_code == 200, changed.text
    oauth.revoke()
    client.publish(topic, '{"n": 2}')
    wait_until(lambda: len(oauth.delivered()) == 2, timeout=20)
    assert [(r.form["password"], r.form["scope"]) for r in oauth.requests] == [
        (USER_PASSWORD, "events:write"),
        (USER_PASSWORD, "events:other"),
    ]

"""Signed deliveries: SERIAL and BATCH requests carry Standard Webhooks signatures that the `standardwebhooks`
package (what a subscriber would use) verifies; a generated secret is answered once, and rotating it signs with
both secrets for the overlap window; an owner's rotation signs with both until the owner ends it; the secrets
are never otherwise answered or logged."""

from __future__ import annotations

import base64
import logging
import os
import time
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Received, SubscriberServer

pytestmark = pytest.mark.integration
OVERLAP = 5.0  # seconds a replaced generated secret still signs


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"signing_secret_overlap": OVERLAP}


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def verifies(secret: str, request: Received) -> bool:
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


def secrets_in_use(hermes: InProcessHermes, topic: str, name: str) -> int:
    return len(hermes.consumer(topic, name).subscription.signing_secrets)


def test_serial_deliveries_are_signed_and_a_rotation_signs_with_both_secrets(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    first, second = new_secret(), new_secret()
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url, signingSecrets=[first])
    path = f"/topics/{topic}/subscriptions/{name}"
    shown = client.management.get(path)
    assert shown.json()["signingSecrets"] == ["******"]

    published = client.publish(topic, '{"n": 1}')
    request = subscriber.wait_for(1, timeout=30)[0]
    assert request.headers["webhook-id"] == published.headers["Hermes-Message-Id"]
    assert verifies(first, request) and not verifies(second, request)

    rotated = client.management.put(path, json={"signingSecrets": [second, "******"]})  # the new one, and keep the old
    assert rotated.status_code == 200, rotated.text
    wait_until(lambda: secrets_in_use(hermes, topic, name) == 2, timeout=20)
    client.publish(topic, '{"n": 2}')
    request = subscriber.wait_for(2, timeout=30)[1]
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    assert verifies(first, request) and verifies(second, request)  # subscribers on either secret accept it

    ended = client.management.put(path, json={"signingSecrets": ["******"]})  # the first stored: the new one
    assert ended.status_code == 200, ended.text
    wait_until(lambda: secrets_in_use(hermes, topic, name) == 1, timeout=20)
    client.publish(topic, '{"n": 3}')
    request = subscriber.wait_for(3, timeout=30)[2]
    assert verifies(second, request) and not verifies(first, request)

    answers = [shown.text, rotated.text, ended.text, client.management.get(f"/topics/{topic}/subscriptions").text]
    for secret in (first, second):
        key = secret.removeprefix("whsec_")
        assert all(key not in text for text in answers), "a signing secret was answered"
        assert key not in caplog.text, "a signing secret was logged"


def test_a_generated_secret_is_answered_once_and_the_one_it_replaces_signs_for_the_overlap_window(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    topic = client.create_topic()
    name = client.create_subscription(topic, subscriber.url)
    path = f"/topics/{topic}/subscriptions/{name}"

    generated = client.management.post(f"{path}/signing-secret")
    assert generated.status_code == 201, generated.text
    assert generated.headers["Cache-Control"] == "no-store"
    first = generated.json()["signingSecret"]
    assert first.startswith("whsec_") and len(base64.b64decode(first[6:])) == 32
    assert "previousSigningSecretExpiresAt" not in generated.json()
    wait_until(lambda: secrets_in_use(hermes, topic, name) == 1, timeout=20)
    client.publish(topic, '{"n": 1}')
    assert verifies(first, subscriber.wait_for(1, timeout=30)[0])

    rotated = client.management.post(f"{path}/signing-secret")
    assert rotated.status_code == 201, rotated.text
    second, expires = rotated.json()["signingSecret"], rotated.json()["previousSigningSecretExpiresAt"]
    assert second != first and abs(expires - (time.time() + OVERLAP)) < 5
    shown = client.management.get(path)
    assert shown.json()["signingSecrets"] == ["******", "******"]
    assert shown.json()["previousSigningSecretExpiresAt"] == expires
    wait_until(lambda: secrets_in_use(hermes, topic, name) == 2, timeout=20)
    client.publish(topic, '{"n": 2}')
    request = subscriber.wait_for(2, timeout=30)[1]
    assert verifies(second, request)
    if int(request.headers["webhook-timestamp"]) + 1 <= expires:  # sent within the window (a loaded machine may
        assert verifies(first, request)  # be later; the unit test of signing_now covers the rule itself)

    wait_until(lambda: time.time() > expires, timeout=OVERLAP + 5)
    client.publish(topic, '{"n": 3}')
    request = subscriber.wait_for(3, timeout=30)[2]
    assert verifies(second, request) and not verifies(first, request)
    assert len(request.headers["webhook-signature"].split(" ")) == 1

    answers = [shown.text, client.management.get(path).text]
    for secret in (first, second):
        key = secret.removeprefix("whsec_")
        assert all(key not in text for text in answers), "a generated secret was answered again"
        assert key not in caplog.text, "a generated secret was logged"


def test_a_secret_is_generated_only_for_an_existing_subscription(client: HermesClient) -> None:
    topic = client.create_topic()
    missing = client.management.post(f"/topics/{topic}/subscriptions/nobody/signing-secret")
    assert (missing.status_code, missing.json()["code"]) == (400, "SUBSCRIPTION_NOT_EXISTS")  # as Hermes answers


def test_a_batch_is_signed_with_its_batch_id(
    hermes: InProcessHermes, client: HermesClient, subscriber: SubscriberServer
) -> None:
    secret = new_secret()
    topic = client.create_topic()
    policy = {"batchSize": 2, "batchTime": 60_000}
    client.create_subscription(
        topic, subscriber.url, deliveryType="BATCH", subscriptionPolicy=policy, signingSecrets=[secret]
    )
    for n in range(2):
        client.publish(topic, f'{{"n": {n}}}')
    request = subscriber.wait_for(1, timeout=30)[0]
    assert request.headers["webhook-id"] == request.headers["Hermes-Batch-Id"]
    assert verifies(secret, request)
    assert not verifies(secret, Received(request.path, request.headers, request.body + b" ", request.at))


def test_a_malformed_secret_is_refused_without_being_repeated(
    client: HermesClient, subscriber: SubscriberServer
) -> None:
    topic = client.create_topic()
    bad = "whsec_" + "x" * 10
    body = {
        "topicName": topic,
        "name": "signed",
        "endpoint": subscriber.url,
        "owner": {"source": "Plaintext", "id": "t"},
    }
    for secrets in ([bad], "whsec_abc", [new_secret()] * 3):
        response = client.management.post(f"/topics/{topic}/subscriptions", json={**body, "signingSecrets": secrets})
        assert response.status_code == 400, response.text
        assert "signingSecrets" in response.json()["message"] and bad not in response.text

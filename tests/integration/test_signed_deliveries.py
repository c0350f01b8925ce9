"""Signed deliveries: SERIAL and BATCH requests carry Standard Webhooks signatures that the `standardwebhooks`
package (what a subscriber would use) verifies; a rotation signs with both secrets; the secrets are never
answered or logged."""

from __future__ import annotations

import base64
import logging
import os

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from tests.conftest import wait_until
from tests.support.hermes import HermesClient, InProcessHermes
from tests.support.subscriber import Received, SubscriberServer

pytestmark = pytest.mark.integration


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

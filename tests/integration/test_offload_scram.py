"""The offload service signs Kafka's SCRAM users in by HTTP SCRAM (RFC 7804), as the protocol requires of a broker
that uses SCRAM: a client uses one credential for both. Here a client that speaks RFC 7804 with scramp."""

from __future__ import annotations

import base64
import uuid
from typing import Any

import bson
import httpx
import pytest
from scramp import ScramClient

from tests.support.hermes import HermesClient, InProcessHermes

pytestmark = pytest.mark.integration

SCRAM = "SCRAM-SHA-512"


@pytest.fixture(scope="module")
def hermes_overrides() -> dict[str, Any]:
    return {"kafka_scram_users": "alice:alice-secret,bob:bob-secret"}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def scram_request(method: str, url: str, user: str, password: str, content: bytes = b"") -> httpx.Response:
    """One request signed in by RFC 7804's exchange: client-first, the server's challenge, client-final."""
    client = ScramClient([SCRAM], user, password)
    with httpx.Client(timeout=30) as http:
        challenge = http.request(
            method, url, content=content, headers={"Authorization": f"{SCRAM} data={_b64(client.get_client_first())}"}
        )
        assert challenge.status_code == 401
        scheme, _, rest = challenge.headers["WWW-Authenticate"].partition(" ")
        attributes = dict(part.strip().partition("=")[::2] for part in rest.split(","))
        assert scheme == SCRAM
        client.set_server_first(base64.b64decode(attributes["data"]).decode())
        final = f"{SCRAM} sid={attributes['sid']}, data={_b64(client.get_client_final())}"
        response = http.request(method, url, content=content, headers={"Authorization": final})
    if response.status_code < 300:  # the server proves it knows the password too
        info = dict(part.strip().partition("=")[::2] for part in response.headers["Authentication-Info"].split(","))
        client.set_server_final(base64.b64decode(info["data"]).decode())
    return response


def test_a_kafka_scram_user_uploads_and_downloads(client: HermesClient, hermes: InProcessHermes) -> None:
    topic = client.create_topic()
    message_id = uuid.uuid4()
    document = bson.encode({"message": b"large", "headers": [["_id", message_id.bytes]]})
    upload = f"{hermes.frontend_url}/offload/topic/{topic}+oversized"
    assert scram_request("POST", upload, "alice", "alice-secret", document).status_code == 201
    download = scram_request("GET", f"{hermes.frontend_url}/offload/msg/{message_id}", "bob", "bob-secret")
    assert download.status_code == 200
    assert bson.decode(download.content)["message"] == b"large"


def test_an_upload_is_a_publish_the_topics_auth_decides(client: HermesClient, hermes: InProcessHermes) -> None:
    topic = client.create_topic(auth={"enabled": True, "publishers": ["alice"], "unauthenticatedAccessEnabled": False})
    upload = f"{hermes.frontend_url}/offload/topic/{topic}+oversized"
    document = bson.encode({"message": b"large"})
    assert scram_request("POST", upload, "alice", "alice-secret", document).status_code == 201
    refused = scram_request("POST", upload, "bob", "bob-secret", document)
    assert (refused.status_code, refused.json()) == (403, {"message": "Permission denied.", "code": "AUTH_ERROR"})


def test_anyone_else_is_refused(client: HermesClient, hermes: InProcessHermes) -> None:
    url = f"{hermes.frontend_url}/offload/msg/{uuid.uuid4()}"
    anonymous = httpx.get(url)
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith(SCRAM)
    for user, password in (("alice", "wrong"), ("mallory", "alice-secret")):  # an unknown user fails alike
        response = scram_request("GET", url, user, password)
        assert (response.status_code, response.json()["code"]) == (401, "UNAUTHORIZED")
        assert response.json()["message"] == "wrong user name or password"
        assert response.headers["WWW-Authenticate"].startswith(SCRAM)
        info = dict(part.strip().partition("=")[::2] for part in response.headers["Authentication-Info"].split(","))
        assert base64.b64decode(info["data"]) == b"e=invalid-proof"  # RFC 7804's server-final of a failure
    assert client.publish(client.create_topic(), "{}").status_code == 201  # publishing is not the offload service's

"""Publishing with authentication on, in real `hermes frontend` processes: the topic's ``auth`` decides as in
Hermes (its TopicAuthorizationTest's cases), credentials are the management API's users, wrong ones are a 401,
``--publish-authentication required`` turns callers without credentials away, and no password is logged."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bson
import httpx
import pytest

from hermes.bench.zookeeper import ZookeeperServer
from hermes.broker.embedded import EmbeddedBroker
from hermes.runtime import Role
from hermes.security.passwords import hash_password
from hermes.security.users import ADMIN, User, UserStore
from tests.support.hermes import HermesClient, HermesProcess, InProcessHermes, hermes_settings, unique
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

PASSWORDS = {"root": "root-password-0001", "alice": "alice-password-0001", "bob": "bob-password-00001"}
WRONG = "not-the-password-0001"
BODY = '{"hello": "world"}'
ACCEPTED = (201, 202)  # 202: a loaded machine's broker missed the ack timeout; the message is kept all the same


def basic(user: str, password: str | None = None) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class Rig:
    """Management in-process and two frontend processes (optional and required), sharing ZooKeeper metadata;
    each process has its own data directory with the same users."""

    def __init__(self, kafka: EmbeddedBroker, zookeeper: ZookeeperServer, tmp_path: Path) -> None:
        metadata = ("--metadata-store", "zookeeper", "--zookeeper-connect", zookeeper.connect)
        root = f"/{unique('auth')}"
        hashes = {user: hash_password(password) for user, password in PASSWORDS.items()}
        for name in ("management", "optional", "required"):
            store = UserStore.in_data_dir(tmp_path / name)
            for user, hashed in hashes.items():
                store.save(User(user, hashed, frozenset({ADMIN}) if user == "root" else frozenset()))
        settings = hermes_settings(
            tmp_path / "management",
            kafka.bootstrap_servers,
            metadata_store="zookeeper",
            zookeeper_connect=zookeeper.connect,
            zookeeper_root=root,
        )
        self.management = InProcessHermes(settings, frozenset({Role.MANAGEMENT})).start()
        common = ("--kafka-bootstrap-servers", kafka.bootstrap_servers, *metadata, "--zookeeper-root", root)
        common += ("--metadata-poll-interval", "0.05", "--workers", "1")
        self.optional = HermesProcess(
            tmp_path / "optional", *common, "--publish-authentication", "optional", command="frontend"
        )
        self.required = HermesProcess(
            tmp_path / "required", *common, "--auth-failed-logins-per-minute", "3", command="frontend"
        )
        with ThreadPoolExecutor(2) as starting:  # side by side: each takes seconds on a loaded machine
            list(starting.map(lambda process: process.start(wait_for="frontend"), (self.optional, self.required)))
        self.client = HermesClient(self.management.management_url, self.optional.frontend_url)
        self.client.management.auth = ("root", PASSWORDS["root"])
        self.strict = HermesClient(self.management.management_url, self.required.frontend_url)

    def close(self) -> None:
        self.client.close()
        self.strict.close()
        for process in (self.optional, self.required):
            process.stop()
        self.management.stop()


@pytest.fixture(scope="module")
def rig(kafka: EmbeddedBroker, zookeeper: ZookeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    running = Rig(kafka, zookeeper, tmp_path_factory.mktemp("publishing-auth"))
    yield running
    running.close()
    for process in (running.optional, running.required):
        log = process.log()
        for password in (*PASSWORDS.values(), WRONG):
            assert password not in log, f"a password is in {process.log_path}"


def topic_with(client: HermesClient, **auth: object) -> str:
    return client.create_topic(auth={"publishers": [], "enabled": False, "unauthenticatedAccessEnabled": True, **auth})


# (the topic's auth, whether alice may publish, whether a caller without credentials may), as Hermes decides
CASES = [
    ({}, True, True),
    ({"enabled": True, "publishers": ["alice"]}, True, True),
    ({"enabled": True, "publishers": ["alice", "bob"], "unauthenticatedAccessEnabled": False}, True, False),
    ({"enabled": True, "publishers": ["bob"]}, False, True),
    ({"enabled": True}, False, True),
    ({"enabled": True, "publishers": ["bob"], "unauthenticatedAccessEnabled": False}, False, False),
    ({"enabled": True, "unauthenticatedAccessEnabled": False}, False, False),
]


def test_the_topics_auth_decides_who_publishes(rig: Rig) -> None:
    client = rig.client
    topics = [(topic_with(client, **auth), alice, guest) for auth, alice, guest in CASES]
    for topic, alice_may, guest_may in topics:
        # the first publish of a new topic may meet a frontend whose cache has not heard of it yet
        as_alice = client.publish(topic, BODY, basic("alice"))
        as_guest = client.publish(topic, BODY)
        for response, may in ((as_alice, alice_may), (as_guest, guest_may)):
            if may:
                assert response.status_code in ACCEPTED, (topic, response.text)
            else:
                assert response.status_code == 403, (topic, response.text)
                assert response.json() == {"message": "Permission denied.", "code": "AUTH_ERROR"}
                assert response.headers["Hermes-Message-Id"]


def test_metrics_name_topics_to_authenticated_scrapes_only(rig: Rig) -> None:
    topic = topic_with(rig.client)
    wait_until(lambda: rig.client.publish(topic, BODY).status_code in ACCEPTED)
    url = f"{rig.optional.frontend_url}/status/prometheus"  # optional: publishing needs no credentials here
    for headers in ({}, basic("alice", WRONG)):
        refused = httpx.get(url, headers=headers, timeout=30)
        assert refused.status_code == 401 and "WWW-Authenticate" in refused.headers, refused.text
        assert topic not in refused.text
    assert topic in httpx.get(url, headers=basic("alice"), timeout=30).text


def test_wrong_credentials_are_a_401_even_where_anyone_may_publish(rig: Rig) -> None:
    topic = topic_with(rig.client)
    for headers in (basic("alice", WRONG), basic("nobody", WRONG), {"Authorization": "Basic !!"}):
        response = rig.client.publish(topic, BODY, headers)
        assert response.status_code == 401, response.text
        assert response.json()["code"] == "UNAUTHORIZED"
        assert response.headers["WWW-Authenticate"] == 'Basic realm="hermes"'
    assert rig.client.publish(f"{topic}-missing", BODY, basic("alice")).status_code == 404


def test_an_offload_upload_is_a_publish_the_topics_auth_decides(rig: Rig) -> None:
    """Kafka clients' uploads of large messages to the offload service, with the publishing port's credentials."""
    client = rig.client
    document = bson.encode({"message": b"large"})
    topics = [(topic_with(client, **auth), alice, guest) for auth, alice, guest in CASES]
    for topic, alice_may, guest_may in topics:
        upload = f"/offload/topic/{topic}+oversized"
        as_alice = client.frontend.post(upload, content=document, headers=basic("alice"))
        as_guest = client.frontend.post(upload, content=document)
        for response, may in ((as_alice, alice_may), (as_guest, guest_may)):
            assert response.status_code == (201 if may else 403), (topic, response.text)
    anonymous = rig.strict.frontend.post(f"/offload/topic/{topics[0][0]}+oversized", content=document)
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"] == 'Basic realm="hermes"'


def test_required_authentication_turns_callers_without_credentials_away(rig: Rig) -> None:
    topic = topic_with(rig.client)
    restricted = topic_with(rig.client, enabled=True, publishers=["bob"])
    strict = rig.strict
    anonymous = strict.publish(topic, BODY)
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"] == 'Basic realm="hermes"'
    assert strict.publish(f"{topic}-missing", BODY).status_code == 401  # before anything about the topic is told
    assert strict.publish(topic, BODY, basic("alice")).status_code in ACCEPTED
    assert strict.publish(restricted, BODY, basic("alice")).status_code == 403
    assert strict.publish(restricted, BODY, basic("bob")).status_code in ACCEPTED
    # repeated (now remembered) credentials keep working
    assert all(strict.publish(topic, BODY, basic("alice")).status_code in ACCEPTED for _ in range(5))
    # guessing is braked: after 3 failures in a minute the address waits (last: it blocks this process's checks)
    statuses = [strict.publish(topic, BODY, basic("bob", WRONG)).status_code for _ in range(4)]
    assert statuses == [401, 401, 401, 429]
    braked = strict.publish(topic, BODY, basic("bob", WRONG))
    assert braked.status_code == 429 and int(braked.headers["Retry-After"]) > 0

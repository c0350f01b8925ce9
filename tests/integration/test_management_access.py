"""The management API with authentication on: Basic users and bearer tokens of a real local issuer, the
permission table of docs/security.md walked row by row, the brake on failed logins, and no secret in any
answer, log line or metric."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from hermes.broker.embedded import EmbeddedBroker
from hermes.management.access import Rule, rule_of
from hermes.management.app import create_app
from hermes.runtime import Role
from hermes.security.passwords import hash_password
from hermes.security.setup import Security
from hermes.security.throttle import FailedLogins
from hermes.security.users import ADMIN, User, UserStore
from tests.support.hermes import InProcessHermes, hermes_settings, unique
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

DOCS = Path(__file__).parents[2] / "docs" / "security.md"
PASSWORDS = {"root": "root-password-0001", "alice": "alice-password-0001", "bob": "bob-password-00001"}


class Issuer:
    """A real HTTP server publishing a JWKS, and the RSA keys that sign its tokens; ``rotate`` replaces them."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, rsa.RSAPrivateKey]] = []
        self.rotate()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks = [
                    {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())), "kid": kid, "alg": "RS256"}
                    for kid, key in issuer.keys
                ]
                body = json.dumps({"keys": jwks}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def rotate(self) -> None:
        self.keys = [(uuid.uuid4().hex, rsa.generate_private_key(public_exponent=65537, key_size=2048))]

    def token(self, subject: str, issuer: str | None = None, expires_in: float = 300, **claims: Any) -> str:
        kid, key = self.keys[0]
        payload = {"iss": issuer or self.url, "sub": subject, "exp": int(time.time() + expires_in), **claims}
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    server = Issuer()
    yield server
    server.server.shutdown()
    server.server.server_close()


class LogRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def records() -> Iterator[LogRecords]:
    handler = LogRecords()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="module")
def secured(
    kafka: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, issuer: Issuer, records: LogRecords
) -> Iterator[InProcessHermes]:
    data_dir = tmp_path_factory.mktemp("secured")
    store = UserStore.in_data_dir(data_dir)
    store.save(User("root", hash_password(PASSWORDS["root"]), frozenset({ADMIN})))
    store.save(User("alice", hash_password(PASSWORDS["alice"]), owners=frozenset({"team-a"})))
    store.save(User("bob", hash_password(PASSWORDS["bob"]), owners=frozenset({"team-b"})))
    store.save(User("svc-a", owners=frozenset({"team-a"})))  # a bearer token's subject
    settings = hermes_settings(data_dir, kafka.bootstrap_servers, auth_jwt_issuer=issuer.url)
    running = InProcessHermes(settings, frozenset({Role.MANAGEMENT})).start()  # the API alone is under test
    yield running
    running.stop()


Responses = list[httpx.Response]


@pytest.fixture(scope="module")
def answers() -> Responses:
    """Every answer of this module, for the secrets test at its end."""
    return []


def basic(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def api(secured: InProcessHermes, answers: Responses) -> Iterator[httpx.Client]:
    client = httpx.Client(base_url=secured.management_url, timeout=30, event_hooks={"response": [_keep(answers)]})
    yield client
    client.close()


def _keep(answers: Responses) -> Any:
    def hook(response: httpx.Response) -> None:
        response.read()
        answers.append(response)

    return hook


def _owner(owner_id: str) -> dict[str, str]:
    return {"source": "Plaintext", "id": owner_id}


@pytest.fixture
def world(api: httpx.Client) -> dict[str, str]:
    """A group; topic ``open`` and ``restricted`` (subscribingRestricted) of team-a; subscription ``s`` of team-b
    on ``open``."""
    group = unique("g")
    assert api.post("/groups", json={"groupName": group}, headers=basic("root")).status_code == 201
    names = {"group": group, "open": f"{group}.open", "restricted": f"{group}.restricted", "subscription": "s"}
    for topic, restricted in (("open", False), ("restricted", True)):
        body = {"name": names[topic], "description": "d", "owner": _owner("team-a"), "contentType": "JSON",
                "subscribingRestricted": restricted}  # fmt: skip
        assert api.post("/topics", json=body, headers=basic("alice")).status_code == 201
    body = {"name": "s", "endpoint": "http://127.0.0.1:9/", "description": "d", "owner": _owner("team-b")}
    assert subscribe(api, names["open"], body, "bob").status_code == 201
    return names


def subscribe(api: httpx.Client, topic: str, body: dict[str, Any], user: str) -> httpx.Response:
    """Creates a subscription; a new topic's first one may answer 503 "try again" while Kafka settles."""
    deadline = time.monotonic() + 15
    while True:
        response = api.post(f"/topics/{topic}/subscriptions", json=body, headers=basic(user))
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


def table() -> list[tuple[str, str, Rule]]:
    rows = re.findall(r"^\| (GET|POST|PUT|DELETE) \| `([^`]+)` \| ([^|]+) \|$", DOCS.read_text(), re.MULTILINE)
    return [(method, path, Rule(rule.strip())) for method, path, rule in rows]


def test_the_table_lists_every_endpoint_with_the_rule_the_api_applies() -> None:
    app = create_app(None, Security(None, ""))  # type: ignore[arg-type]  # routes only
    routes = {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD" and r.resource}
    rows = table()
    assert {(method, path) for method, path, _ in rows} == routes
    assert [rule for method, path, rule in rows] == [rule_of(method, path) for method, path, _ in rows]


# who is denied and who is allowed, for each rule (admins are allowed everything)
_DENIED = {Rule.ADMIN: "alice", Rule.TOPIC_OWNER: "bob", Rule.SUBSCRIPTION_OWNER: "alice", Rule.OWNER_IN_BODY: "bob",
           Rule.SUBSCRIBER: "bob"}  # fmt: skip
_ALLOWED = {Rule.PUBLIC: None, Rule.ANY: "bob", Rule.ADMIN: "root", Rule.TOPIC_OWNER: "alice",
            Rule.SUBSCRIPTION_OWNER: "bob", Rule.OWNER_IN_BODY: "alice", Rule.SUBSCRIBER: "alice"}  # fmt: skip


def _request(world: dict[str, str], method: str, path: str, rule: Rule) -> tuple[str, Any]:
    values = {"topic": world["restricted"] if rule is Rule.SUBSCRIBER else world["open"], "group": world["group"],
              "subscription": world["subscription"], "source": "Plaintext", "id": "team-a", "provider": "p",
              "taskId": "x", "datacenter": "dc", "idx": "0", "cluster": "primary", "partition": "0", "offset": "0",
              "messageId": "m", "version": "1", "deadLetterId": "0"}  # fmt: skip
    url = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)
    if rule is Rule.OWNER_IN_BODY:
        return url, {"name": f"{world['group']}.{unique('t')}", "description": "d", "owner": _owner("team-a")}
    if rule is Rule.SUBSCRIBER:  # team-a's subscription on team-a's restricted topic: bob may not
        return url, {
            "name": unique("s"),
            "endpoint": "http://127.0.0.1:9/",
            "description": "d",
            "owner": _owner("team-a"),
        }
    return url, ({} if method in ("POST", "PUT") else None)


def _call(api: httpx.Client, method: str, url: str, body: Any, user: str | None) -> httpx.Response:
    return api.request(method, url, json=body, headers=basic(user) if user else {})


def test_every_row_of_the_table_is_enforced(api: httpx.Client, world: dict[str, str]) -> None:
    # the changes that remove what later rows use come last, subscriptions before topics before groups
    rows = sorted(table(), key=lambda row: (row[0] == "DELETE", -row[1].count("/")))
    for method, path, rule in rows:
        url, body = _request(world, method, path, rule)
        anonymous = _call(api, method, url, body, None)
        if rule is Rule.PUBLIC:
            assert anonymous.status_code < 400, (method, path, anonymous.text)
            continue
        assert anonymous.status_code == 401, (method, path, anonymous.text)
        assert anonymous.headers["WWW-Authenticate"].startswith("Basic")
        if rule in _DENIED:
            denied = _call(api, method, url, body, _DENIED[rule])
            assert (denied.status_code, denied.json()["code"]) == (403, "PERMISSION_DENIED"), (method, path)
    for method, path, rule in rows:
        url, body = _request(world, method, path, rule)
        allowed = _call(api, method, url, body, _ALLOWED[rule])
        assert allowed.status_code != 401, (method, path)
        assert allowed.status_code != 403 or allowed.json()["code"] != "PERMISSION_DENIED", (method, path)


def test_subscribing_and_owner_changes_follow_hermes_rules(api: httpx.Client) -> None:
    group = unique("g")
    api.post("/groups", json={"groupName": group}, headers=basic("root"))
    topic = f"{group}.t"
    body = {"name": topic, "description": "d", "owner": _owner("team-a"), "contentType": "JSON"}
    assert api.post("/topics", json=body, headers=basic("alice")).status_code == 201
    subscription = {"name": "mine", "endpoint": "http://127.0.0.1:9/", "description": "d", "owner": _owner("team-b")}
    # an unrestricted topic: anyone may subscribe, for an owner id they hold
    created = subscribe(api, topic, subscription, "bob")
    assert created.status_code == 201, created.text
    stolen = {**subscription, "name": "theirs", "owner": _owner("team-c")}
    assert api.post(f"/topics/{topic}/subscriptions", json=stolen, headers=basic("bob")).status_code == 403
    # giving a topic away needs the new owner id too; the owner may change what it covers
    assert api.put(f"/topics/{topic}", json={"owner": _owner("team-b")}, headers=basic("alice")).status_code == 403
    assert api.put(f"/topics/{topic}", json={"description": "new"}, headers=basic("alice")).status_code == 200
    restricted = api.put(f"/topics/{topic}", json={"subscribingRestricted": True}, headers=basic("alice"))
    assert restricted.status_code == 200
    late = {**subscription, "name": "late"}
    assert api.post(f"/topics/{topic}/subscriptions", json=late, headers=basic("bob")).status_code == 403
    assert subscribe(api, topic, late, "root").status_code == 201


def test_only_admins_set_a_subscriptions_inflight_size(api: httpx.Client, world: dict[str, str]) -> None:
    """Hermes' rule: a SERIAL subscription's inflightSize is set and changed by admins only."""
    topic, path = world["open"], f"/topics/{world['open']}/subscriptions/{world['subscription']}"
    body = {"name": "sized", "endpoint": "http://127.0.0.1:9/", "description": "d", "owner": _owner("team-b")}
    sized = {**body, "subscriptionPolicy": {"inflightSize": 5}}
    refused = api.post(f"/topics/{topic}/subscriptions", json=sized, headers=basic("bob"))
    assert refused.status_code == 400 and "subscriptionPolicy.inflightSize" in refused.json()["message"]
    assert subscribe(api, topic, sized, "root").status_code == 201
    change = {"subscriptionPolicy": {"inflightSize": 7}}
    assert api.put(path, json=change, headers=basic("bob")).status_code == 400
    assert api.put(path, json=change, headers=basic("root")).status_code == 200
    kept = api.put(path, json={"subscriptionPolicy": {"rate": 10}}, headers=basic("bob"))  # other fields: the owner
    assert kept.status_code == 200 and kept.json()["subscriptionPolicy"]["inflightSize"] == 7


def test_roles_are_the_callers(api: httpx.Client, world: dict[str, str]) -> None:
    topic, subscription = world["open"], world["subscription"]
    assert api.get("/roles", headers=basic("root")).json() == ["admin", "any"]
    assert api.get("/roles", headers=basic("bob")).json() == ["any"]
    assert api.get(f"/roles/topics/{topic}", headers=basic("alice")).json() == ["any", "topicOwner"]
    assert api.get(f"/roles/topics/{topic}", headers=basic("bob")).json() == ["any"]
    path = f"/roles/topics/{topic}/subscriptions/{subscription}"
    assert api.get(path, headers=basic("bob")).json() == ["any", "subscriptionOwner"]
    assert api.get(path, headers=basic("alice")).json() == ["any", "topicOwner"]
    assert api.get("/roles").status_code == 401


def test_bearer_tokens_of_the_issuer_are_accepted_across_key_rotation(
    api: httpx.Client, issuer: Issuer, secured: InProcessHermes, world: dict[str, str]
) -> None:
    assert api.get("/roles", headers=bearer(issuer.token("svc-a"))).json() == ["any"]
    roles = api.get(f"/roles/topics/{world['open']}", headers=bearer(issuer.token("svc-a")))
    assert roles.json() == ["any", "topicOwner"]  # its owner ids come from the users file
    assert api.get("/roles", headers=bearer(issuer.token("stranger"))).json() == ["any"]
    for refused in (
        issuer.token("svc-a", issuer="http://elsewhere"),
        issuer.token("svc-a", expires_in=-120),
        issuer.token("svc-a")[:-4] + "AAAA",
        jwt.encode(
            {"iss": issuer.url, "sub": "root", "exp": time.time() + 60},
            "a-guessed-secret-of-32-bytes-or-more",
            algorithm="HS256",
        ),
    ):
        assert api.get("/roles", headers=bearer(refused)).status_code == 401
    authenticator = secured.hermes.security.authenticator  # type: ignore[union-attr]
    assert authenticator is not None and authenticator.tokens is not None
    authenticator.tokens.refetch_interval = 0  # the test rotates keys sooner than a real issuer
    issuer.rotate()
    assert api.get("/roles", headers=bearer(issuer.token("svc-a"))).status_code == 200


def test_a_verified_bearer_token_is_known_without_verifying_again_until_it_expires(
    issuer: Issuer, secured: InProcessHermes, monkeypatch: pytest.MonkeyPatch
) -> None:
    authenticator = secured.hermes.security.authenticator  # type: ignore[union-attr]
    assert authenticator is not None
    header = f"Bearer {issuer.token('svc-a', expires_in=2)}"
    assert authenticator.known(header) is None  # never verified: the publish path must verify it
    verified = secured.call(authenticator.authenticate(header, "127.0.0.1"))
    monkeypatch.setattr(jwt, "decode", lambda *_a, **_k: pytest.fail("verified again"))
    for _ in range(2):  # publishing, then management
        assert authenticator.known(header) == verified and verified.owners == {"team-a"}
    assert secured.call(authenticator.authenticate(header, "127.0.0.1")) == verified
    wait_until(lambda: authenticator.known(header) is None, timeout=5)  # expired: verified anew, then refused


def test_failed_logins_are_braked_per_client(api: httpx.Client, secured: InProcessHermes) -> None:
    authenticator = secured.hermes.security.authenticator  # type: ignore[union-attr]
    assert authenticator is not None
    authenticator.failures = FailedLogins(limit=3)
    try:
        wrong = {"Authorization": "Basic " + base64.b64encode(b"alice:guess-number-one").decode()}
        assert [api.get("/roles", headers=wrong).status_code for _ in range(3)] == [401, 401, 401]
        braked = api.get("/roles", headers=basic("alice"))  # even the right password waits
        assert braked.status_code == 429 and int(braked.headers["Retry-After"]) > 0
        assert braked.json()["code"] == "TOO_MANY_FAILED_LOGINS"
    finally:
        authenticator.failures = FailedLogins()


def test_concurrent_guesses_are_braked_and_a_login_from_elsewhere_stays_fast(
    secured: InProcessHermes, records: LogRecords
) -> None:
    """60 concurrent wrong passwords from 127.0.0.2 (the loopback network: a socket bound to 127.0.0.1 accepts it)
    while a user never verified before signs in from 127.0.0.1."""
    authenticator = secured.hermes.security.authenticator  # type: ignore[union-attr]
    assert authenticator is not None
    authenticator.failures = FailedLogins()
    UserStore.in_data_dir(secured.hermes.settings.data_dir).save(User("carol", hash_password("carol-password-01")))
    right = {"Authorization": "Basic " + base64.b64encode(b"carol:carol-password-01").decode()}
    wait_until(lambda: authenticator.users.get("carol") is not None)
    before = len(records.lines)

    async def attack_and_login() -> tuple[list[int], float, float]:
        attacker = httpx.AsyncClient(
            base_url=secured.management_url, timeout=120, transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        )
        async with attacker, httpx.AsyncClient(base_url=secured.management_url, timeout=120) as user:
            started = time.monotonic()
            wrong = ["Basic " + base64.b64encode(f"alice:guess-{n}".encode()).decode() for n in range(60)]
            guesses = [asyncio.create_task(attacker.get("/roles", headers={"Authorization": w})) for w in wrong]
            await asyncio.wait(guesses, return_when=asyncio.FIRST_COMPLETED)  # the attack is under way
            login = time.monotonic()
            assert (await user.get("/roles", headers=right)).status_code == 200
            login = time.monotonic() - login
            statuses = [answer.status_code for answer in await asyncio.gather(*guesses)]
            return statuses, login, time.monotonic() - started

    try:
        statuses, login, attack = asyncio.run(attack_and_login())
    finally:
        authenticator.failures = FailedLogins()
    assert statuses.count(429) >= 45 and statuses.count(401) <= 10, statuses
    assert login < 5, (login, attack)
    failures = [line for line in records.lines[before:] if "failed login" in line]
    assert len(failures) == 1 and "'alice'" in failures[0] and "127.0.0.2" in failures[0], failures
    scraped = httpx.get(f"{secured.management_url}/status/prometheus", headers=basic("root")).text
    assert re.search(r'^hermes_failed_logins_total\{reason="braked"\} [1-9]', scraped, re.MULTILINE)


def test_the_consumers_status_port_serves_metrics_to_authenticated_scrapes_only(
    kafka: EmbeddedBroker, secured: InProcessHermes
) -> None:
    settings = hermes_settings(secured.hermes.settings.data_dir, kafka.bootstrap_servers, consumers_port=0)
    consumers = InProcessHermes(settings, frozenset({Role.CONSUMERS})).start()
    try:
        server = consumers.hermes.consumers.server  # type: ignore[union-attr]
        assert server is not None
        url = f"http://127.0.0.1:{server.port}"
        assert httpx.get(f"{url}/status/health").status_code == 200
        refused = httpx.get(f"{url}/status/prometheus")
        assert refused.status_code == 401 and "WWW-Authenticate" in refused.headers
        assert "hermes_" not in refused.text
        assert "hermes_" in httpx.get(f"{url}/status/prometheus", headers=basic("root")).text
    finally:
        consumers.stop()


def test_oversized_headers_and_bodies_are_refused_before_reading(secured: InProcessHermes) -> None:
    with httpx.Client(base_url=secured.management_url) as client:
        assert client.get("/roles", headers={"X-Big": "x" * 20_000}).status_code in (400, 431)
    host, port = secured.management_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"POST /topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000000000\r\n\r\n{")  # fmt: skip
        assert raw.recv(100).startswith(b"HTTP/1.1 413")


def test_no_secret_in_answers_logs_or_metrics(
    api: httpx.Client, issuer: Issuer, answers: Responses, records: LogRecords
) -> None:
    token = issuer.token("svc-a")
    api.get("/topics", headers=bearer(token))
    api.get("/topics", headers=bearer(token[:-3] + "xyz"))
    wrong = {"Authorization": "Basic " + base64.b64encode(b"bob:" + PASSWORDS["root"].encode()).decode()}
    api.get("/topics", headers=wrong)
    metrics = api.get("/status/prometheus", headers=basic("root")).text
    secrets = [*PASSWORDS.values(), token, token.split(".")[2]]
    outputs = [metrics, *records.lines, *(answer.text for answer in answers), *(str(a.headers) for a in answers)]
    assert len(answers) > 100
    leaks = [(secret, output[:200]) for secret in secrets for output in outputs if secret in output]
    assert not leaks

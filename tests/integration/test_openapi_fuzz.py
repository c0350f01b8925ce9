"""Schemathesis against the running management API, with authentication on (signed in as an admin) and off:
every operation of its OpenAPI document, positive and negative data, all of schemathesis' checks, a bounded number
of examples; then workflows of operations chained by the document's links (stateful), with the stateful checks.
No 5xx, no answer the document does not describe, no invalid request accepted and no schema-valid request
rejected, except for the rejections below, which depend on what a JSON Schema cannot say. Then every operation once
without credentials: a 401, as documented, unless it is public.

The publishing API likewise, against its own document (the frontend's /openapi.json), on the same Hermes: every
operation signed in as a publisher and without credentials, and no publish succeeds without permission: to a
topic that names other publishers, or without credentials (--publish-authentication required)."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Flaky, Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

from hermes.broker.embedded import EmbeddedBroker
from hermes.frontend import openapi as publishing_openapi
from hermes.management import openapi
from hermes.runtime import Role
from hermes.security.passwords import hash_password
from hermes.security.users import ADMIN, User, UserStore
from tests.support.hermes import InProcessHermes, hermes_settings, unique

pytestmark = pytest.mark.integration

# 400s a schema-valid request may get, by the error message, and why the document cannot rule them out
STATE_OR_GRAMMAR = re.compile(
    "|".join(
        [
            r"_NOT_EXISTS|_ALREADY_EXISTS|_DO_NOT_EXIST",  # (codes) the installation's state; Hermes answers 400
            r"_DOESNT_SUPPORT_AUTOCOMPLETE",  # (code) the owner source's kind: Hermes' Plaintext source answers 400
            r"topic \S+ does not exist|has no offline storage|is a (JSON|AVRO) topic",  # the topics' state
            r"AVRO is only available on AVRO topics",  # the topic's state
            # the topic's state, a stored field against a change
            r"is for subscriptions of CloudEvents topics|CloudEvents topics take JSON|cloudEvents: cannot be changed",
            r"must match the topic in the path",  # a body field against a path parameter
            r"must be after startTimestamp|(tokenRequestMaxDelay|delayTo): must be at least",  # field against field
            r"is not available with a jms:// endpoint",  # field against field
            r"statusRules\[\d+\]\.status: (never matches|ends before it starts)",  # a rule against earlier ones
            r"retryParking: (cannot be combined with ordering KEY|is for ANYCAST)",  # field against field
            r"deadLetters.enabled: must be on to redrive",  # the subscription's state
            r"idempotencyWindow: must be at most",  # its duration against its unit
            r"is not a valid jsonpath path \(",  # JsonPath's grammar is not a regular expression
            r"is not a valid regular expression",  # nor are Python's regular expressions
            r"does not appear to be an IPv4 or IPv6 address",  # nor practically an IPv6 address's
            r"^schema: ",  # a valid Avro schema
        ]
    )
)
SCHEMA = schemathesis.openapi.from_dict(openapi.document())
# POST /mode?mode=readOnly would make every later change answer 503
OPERATIONS = [op.ok() for op in SCHEMA.get_all_operations() if op.ok().label != "POST /mode"]


PASSWORD = "fuzzing-admin-password-01"
# The same examples on every run (CI must not pass or fail by the draw), none kept between runs, no time limit
FUZZING: dict[str, Any] = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "suppress_health_check": list(HealthCheck),
}
# Headers that frame the HTTP message: the client sets them; made-up values are refused by the HTTP parser (a
# plain-text 400 before any handler, or aiohttp's 417 for an Expect other than 100-continue), which tells nothing
# about the API
FRAMING = {"content-length", "transfer-encoding", "host", "connection", "expect"}


def basic(user: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()}


SIGNED_IN = basic("root")
PUBLISHER = basic("alice")  # no role: publishes where a topic lets it
PUBLISHING = schemathesis.openapi.from_dict(publishing_openapi.document())
PUBLISHING_OPERATIONS = [op.ok() for op in PUBLISHING.get_all_operations()]


@pytest.fixture(scope="module")
def hermes(kafka: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessHermes]:
    """Every role, with authentication on (an admin in the users file)."""
    data_dir = tmp_path_factory.mktemp("fuzzed")
    users = UserStore.in_data_dir(data_dir)
    users.save(User("root", hash_password(PASSWORD), frozenset({ADMIN})))
    users.save(User("alice", hash_password(PASSWORD), frozenset()))
    running = InProcessHermes(hermes_settings(data_dir, kafka.bootstrap_servers)).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def open_hermes(kafka: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessHermes]:
    """Management alone, with authentication off (no users file): every caller may do everything."""
    settings = hermes_settings(tmp_path_factory.mktemp("fuzzed-open"), kafka.bootstrap_servers)
    running = InProcessHermes(settings, frozenset({Role.MANAGEMENT})).start()
    yield running
    running.stop()


@pytest.fixture(params=["authentication on", "authentication off"])
def management(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """The management API's URL and the headers that sign its caller in."""
    if request.param == "authentication on":
        return request.getfixturevalue("hermes").management_url, SIGNED_IN
    return request.getfixturevalue("open_hermes").management_url, {}


def _explained(response: Any) -> bool:
    if response.status_code == 406:  # documented: an operation this installation disables (removing schemas)
        return True
    return response.status_code == 400 and STATE_OR_GRAMMAR.search(response.text) is not None


def _framed_by_the_client(case: Any) -> None:
    case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() not in FRAMING}


# ignored_auth would repeat each request with made-up credentials (a scrypt each): a test below does it
def _excluded(response: Any) -> list[Any]:
    if _explained(response):  # negative generation too may draw a schema-valid request
        return [ignored_auth, positive_data_acceptance]
    return [ignored_auth]


def _linked_against_its_schema(case: Any) -> bool:
    """Whether a link fed a path parameter a value its own schema refuses (a group's name in a topic's place): the
    request is not schema-valid, so its 400 is no valid request rejected."""
    values = case.path_parameters or {}
    for parameter in case.operation.definition.raw.get("parameters", []):
        schema, value = parameter.get("schema", {}), values.get(parameter["name"])
        if (
            parameter.get("in") == "path"
            and schema.get("type") == "string"
            and isinstance(value, str)
            and not jsonschema.Draft202012Validator(schema).is_valid(value)
        ):
            return True
    return False


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_every_operation_keeps_its_document(
    management: tuple[str, dict[str, str]], operation: Any, mode: GenerationMode
) -> None:
    url, credentials = management

    # without authentication the handlers are the same: half the examples, for the suite's time
    @settings(max_examples=6 if credentials else 3, **FUZZING)
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        _framed_by_the_client(case)
        response = case.call(base_url=url, headers=credentials)
        case.validate_response(response, excluded_checks=_excluded(response))

    try:
        run()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise
        pytest.skip("no request to it can be invalid")


def test_workflows_keep_the_document(management: tuple[str, dict[str, str]]) -> None:
    """Sequences of operations, each fed what earlier answers gave (a created topic's name, ...), with every
    check, the stateful ones too (a deleted resource is gone, a created one is there)."""
    url, credentials = management
    failures: list[Exception] = []

    class Workflow(SCHEMA.as_state_machine()):  # type: ignore[misc]
        def before_call(self, case: Any) -> None:
            _framed_by_the_client(case)
            if case.operation.label == "POST /mode":  # read-only would make every later change a 503
                case.query = {**(case.query or {}), "mode": "readWrite"}

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": url, "headers": credentials}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            excluded = _excluded(response)
            if _linked_against_its_schema(case):
                excluded.append(positive_data_acceptance)
            try:
                case.validate_response(
                    response, excluded_checks=excluded, transport_kwargs=kwargs, recorder=self.recorder
                )
            except Exception as exc:
                failures.append(exc)
                raise

    # no shrinking: against a live server a replay meets another state
    try:
        Workflow.run(settings=settings(max_examples=25, stateful_step_count=6, phases=[Phase.generate], **FUZZING))
    except Flaky:  # the server's state steered which steps could follow (as schemathesis' own runner, not a failure)
        if failures:
            raise failures[0] from None


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_every_operation_refuses_a_caller_without_credentials(hermes: InProcessHermes, operation: Any) -> None:
    public = operation.definition.raw.get("security") == []

    @settings(max_examples=1, **FUZZING)
    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def run(case: Any) -> None:
        case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}  # generated
        response = case.call(base_url=hermes.management_url)
        case.validate_response(response, excluded_checks=[positive_data_acceptance])  # 401 is documented
        if not public:
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"] == ['Basic realm="hermes"']

    run()


@pytest.fixture(scope="module")
def topics(hermes: InProcessHermes) -> dict[str, str]:
    """A topic anyone signed in may publish to, and one only bob may."""
    group = unique("fuzz")
    owner = {"source": "Plaintext", "id": "fuzz"}
    with httpx.Client(base_url=hermes.management_url, headers=SIGNED_IN, timeout=30) as management:
        assert management.post("/groups", json={"groupName": group}).status_code == 201
        names = {"open": f"{group}.open", "guarded": f"{group}.guarded"}
        auth = {"open": {"enabled": False}, "guarded": {"enabled": True, "publishers": ["bob"]}}
        for kind, name in names.items():
            body = {"name": name, "description": "d", "owner": owner, "contentType": "JSON", "auth": auth[kind]}
            assert management.post("/topics", json=body).status_code == 201
    return names


def _without_generated_credentials(case: Any) -> None:
    """Also without a generated Idempotency-Key: one the fuzzer reuses with another body is a documented 422 that
    depends on the examples before it (test_idempotency.py tests keys)."""
    generated = ("authorization", "idempotency-key")
    case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() not in generated}


# Positive data only: the document accepts every topic name and any JSON body, so no request can be invalid
@pytest.mark.parametrize("operation", PUBLISHING_OPERATIONS, ids=[op.label for op in PUBLISHING_OPERATIONS])
def test_every_publishing_operation_keeps_its_document(
    hermes: InProcessHermes, topics: dict[str, str], operation: Any
) -> None:
    @settings(max_examples=4, **FUZZING)
    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def run(case: Any) -> None:
        if case.path_parameters:
            case.path_parameters = {"topic": topics["open"]}  # a made-up topic is a documented 404 at best
        _without_generated_credentials(case)
        for credentials in (PUBLISHER, {}):
            response = case.call(base_url=hermes.frontend_url, headers=credentials)
            excluded = [ignored_auth] if credentials else [ignored_auth, positive_data_acceptance]  # 401 first
            case.validate_response(response, excluded_checks=excluded)
            if case.path_parameters and not credentials:
                assert response.status_code == 401, response.text

    run()


def test_no_publish_succeeds_without_permission(hermes: InProcessHermes, topics: dict[str, str]) -> None:
    publish = PUBLISHING["/topics/{topic}"]["POST"]

    @settings(max_examples=6, **FUZZING)
    @given(case=publish.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def run(case: Any) -> None:
        _without_generated_credentials(case)
        for topic, credentials, refused in (
            (topics["guarded"], PUBLISHER, 403),  # alice is not among its publishers
            (topics["guarded"], {}, 401),
            (topics["open"], {}, 401),  # required authentication: no publish without credentials
        ):
            case.path_parameters = {"topic": topic}
            response = case.call(base_url=hermes.frontend_url, headers=credentials)
            assert response.status_code == refused, (topic, bool(credentials), response.text)

    run()


def _documented(body: Any, component: str) -> bool:
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"#/components/schemas/{component}", "components": openapi.document()["components"]}
    )
    return validator.is_valid(body)


def test_corners_the_fuzzing_found_once_are_documented_as_answered(hermes: InProcessHermes) -> None:
    """A null number is taken as absent, and documented so; a topic name that is not group.topic is outside the
    publishing document (its publish is refused)."""
    topic_name = PUBLISHING.raw_schema["paths"]["/topics/{topic}"]["post"]["parameters"][0]["schema"]
    assert re.search(topic_name["pattern"], "group.topic") and not re.search(topic_name["pattern"], "notqualified")
    with httpx.Client(base_url=hermes.management_url, headers=SIGNED_IN, timeout=30) as management:
        group = unique("corner")
        assert management.post("/groups", json={"groupName": group}).status_code == 201
        owner = {"source": "Plaintext", "id": "fuzz"}
        topic = {"name": f"{group}.t", "description": "d", "owner": owner, "contentType": "JSON"}
        assert management.post("/topics", json=topic).status_code == 201
        subscription = {
            "topicName": f"{group}.t",
            "name": "s",
            "endpoint": "http://127.0.0.1:1/",
            "description": "d",
            "owner": owner,
            "subscriptionPolicy": {"socketTimeout": None, "rate": None},
        }
        assert _documented(subscription, "Subscription")
        created = management.post(f"/topics/{group}.t/subscriptions", json=subscription)
        assert created.status_code == 201, created.text
        assert created.json()["subscriptionPolicy"]["socketTimeout"] == 0

"""Schemathesis against the running management API, with authentication on: every operation of its OpenAPI
document, signed in as an admin, positive and negative data, all of schemathesis' checks, a bounded number of
examples. No 5xx, no answer the document does not describe, no invalid request accepted and no schema-valid
request rejected, except for the rejections below, which depend on what a JSON Schema cannot say. Then every
operation once without credentials: a 401, as documented, unless it is public."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

from hermes.broker.embedded import EmbeddedBroker
from hermes.management import openapi
from hermes.security.passwords import hash_password
from hermes.security.users import ADMIN, User, UserStore
from tests.support.hermes import InProcessHermes, hermes_settings

pytestmark = pytest.mark.integration

# 400s a schema-valid request may get, by the error message, and why the document cannot rule them out
STATE_OR_GRAMMAR = re.compile(
    "|".join(
        [
            r"_NOT_EXISTS|_ALREADY_EXISTS|_DO_NOT_EXIST",  # (codes) the installation's state; Hermes answers 400
            r"topic \S+ does not exist|has no offline storage|is a (JSON|AVRO) topic",  # the topics' state
            r"AVRO is only available on AVRO topics",  # the topic's state
            r"must match the topic in the path",  # a body field against a path parameter
            r"must be after startTimestamp|(tokenRequestMaxDelay|delayTo): must be at least",  # field against field
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
SIGNED_IN = {"Authorization": "Basic " + base64.b64encode(f"root:{PASSWORD}".encode()).decode()}


@pytest.fixture(scope="module")
def hermes(kafka: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessHermes]:
    """Every role, with authentication on (an admin in the users file)."""
    data_dir = tmp_path_factory.mktemp("fuzzed")
    UserStore.in_data_dir(data_dir).save(User("root", hash_password(PASSWORD), frozenset({ADMIN})))
    running = InProcessHermes(hermes_settings(data_dir, kafka.bootstrap_servers)).start()
    yield running
    running.stop()


def _explained(response: Any) -> bool:
    return response.status_code == 400 and STATE_OR_GRAMMAR.search(response.text) is not None


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_every_operation_keeps_its_document(hermes: InProcessHermes, operation: Any, mode: GenerationMode) -> None:
    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=hermes.management_url, headers=SIGNED_IN)
        # ignored_auth would repeat each request with made-up credentials (a scrypt each): the test below does it
        excluded = [ignored_auth]
        if mode is GenerationMode.POSITIVE and _explained(response):
            excluded.append(positive_data_acceptance)
        case.validate_response(response, excluded_checks=excluded)

    try:
        run()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise
        pytest.skip("no request to it can be invalid")


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_every_operation_refuses_a_caller_without_credentials(hermes: InProcessHermes, operation: Any) -> None:
    public = operation.definition.raw.get("security") == []

    @settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    def run(case: Any) -> None:
        case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}  # generated
        response = case.call(base_url=hermes.management_url)
        case.validate_response(response, excluded_checks=[positive_data_acceptance])  # 401 is documented
        if not public:
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"] == ['Basic realm="hermes"']

    run()

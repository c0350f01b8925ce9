"""Schemathesis against the running management API: every operation of its OpenAPI document, positive and
negative data, all of schemathesis' checks, a bounded number of examples. No 5xx, no answer the document does
not describe, no invalid request accepted and no schema-valid request rejected, except for the rejections
below, which depend on what a JSON Schema cannot say."""

from __future__ import annotations

import re
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from hermes.management import openapi
from tests.support.hermes import InProcessHermes

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


def _explained(response: Any) -> bool:
    return response.status_code == 400 and STATE_OR_GRAMMAR.search(response.text) is not None


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_every_operation_keeps_its_document(hermes: InProcessHermes, operation: Any, mode: GenerationMode) -> None:
    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        response = case.call(base_url=hermes.management_url)
        excluded = [positive_data_acceptance] if mode is GenerationMode.POSITIVE and _explained(response) else []
        case.validate_response(response, excluded_checks=excluded)

    try:
        run()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise
        pytest.skip("no request to it can be invalid")

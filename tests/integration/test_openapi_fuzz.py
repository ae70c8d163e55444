"""Fuzz the gateway's OpenAPI surface (schemathesis) against real processes.

Whatever the body, the gateway must answer with a status its OpenAPI
document lists, in the documented shape, and never with a 5xx: malformed
input is the client's error, not a crash. Not checked: that every
schema-valid body is accepted, since some limits depend on the model
(context length, the served model id, the vocabulary) and are 400/404/413.
(schemathesis's pytest plugin does not load under this pytest, so its
strategies are driven by hypothesis directly.)
"""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.stack import start_stack

pytestmark = pytest.mark.integration
EXAMPLES_PER_OPERATION = 60
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def api_schema(demo_checkpoint, tmp_path_factory):
    stack = start_stack(demo_checkpoint, tmp_path_factory.mktemp("fuzz"))
    yield schemathesis.openapi.from_url(f"{stack.url}/openapi.json")
    stack.stop()


def operations(schema):
    return [result.ok() for result in schema.get_all_operations()]


def test_every_operation_is_fuzzed(api_schema):
    labels = {op.label for op in operations(api_schema)}
    assert {"POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models"} <= labels


@pytest.mark.parametrize(
    "label", ["POST /v1/chat/completions", "POST /v1/completions", "GET /v1/models", "GET /readyz"]
)
def test_no_input_makes_the_gateway_fail(api_schema, label):
    operation = next(op for op in operations(api_schema) if op.label == label)

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
    def call(case):
        case.call_and_validate(checks=CHECKS)

    call()

"""Fuzz the gateway's OpenAPI surface (schemathesis) against real processes: 0 responses >= 500 in over 1,000 cases.

Whatever the body, the gateway must answer with a status its OpenAPI
document lists, in the documented shape, and never with a 5xx: malformed
input is the client's error, not a crash. Not checked: that every
schema-valid body is accepted, since some limits depend on the model
(context length, the served model id, the vocabulary) and are 400/404/413.
The same generated bodies go to the edge registration route (with its
token) and to the local agent on loopback (with the device's token), whose
only promise here is no 5xx. (schemathesis's pytest plugin does not load
under this pytest, so its strategies are driven by hypothesis directly.)
"""

import json
import re

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tandem.stack import start_local_stack
from tests.conftest import free_port
from tests.stack import write_policy

pytestmark = pytest.mark.integration
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EDGE_TOKEN = "fuzz-edge-token"
# Cases per operation: 1,350 in all (the GETs take no input, so hypothesis stops after one case each).
EXAMPLES = {
    "POST /v1/chat/completions": 300,
    "POST /v1/completions": 250,
    "POST /v1/responses": 250,
    "POST /v1/route/explain": 250,
    "POST /v1/edge/register": 150,
    "GET /v1/models": 10,
    "GET /readyz": 10,
}
LOCAL_AGENT_EXAMPLES = 150
calls: dict[str, int] = {}


@pytest.fixture(scope="module")
def live(demo_checkpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz")
    policy = write_policy(work / "policy.yaml", free_port(), free_port())
    agent_port = free_port()
    env = {"TANDEM_EDGE_TOKEN": EDGE_TOKEN}
    stack = start_local_stack(demo_checkpoint, policy, work, free_port(), env, local_agent_port=agent_port)
    yield schemathesis.openapi.from_url(f"{stack.url}/openapi.json"), f"http://127.0.0.1:{agent_port}"
    stack.stop()


def operation(schema, label):
    return next(result.ok() for result in schema.get_all_operations() if result.ok().label == label)


def test_every_operation_is_fuzzed(live):
    schema, _ = live
    labels = {result.ok().label for result in schema.get_all_operations()}
    assert set(EXAMPLES) - {"GET /readyz"} <= labels


@pytest.mark.parametrize("label", sorted(EXAMPLES))
def test_no_input_makes_the_gateway_fail(live, label):
    schema, _ = live
    headers = {"Authorization": f"Bearer {EDGE_TOKEN}"} if label == "POST /v1/edge/register" else None

    @given(case=operation(schema, label).as_strategy())
    @settings(max_examples=EXAMPLES[label], deadline=None, suppress_health_check=list(HealthCheck))
    def call(case):
        calls[label] = calls.get(label, 0) + 1
        case.call_and_validate(headers=headers, checks=CHECKS)

    call()


def test_no_input_makes_the_local_agent_fail(live, local_token_file):
    schema, agent = live
    headers = {"Authorization": f"Bearer {local_token_file.read_text().strip()}"}

    @given(case=operation(schema, "POST /v1/chat/completions").as_strategy())
    @settings(max_examples=LOCAL_AGENT_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    def call(case):
        calls["local agent"] = calls.get("local agent", 0) + 1
        case.call_and_validate(base_url=agent, headers=headers, checks=[not_a_server_error])

    call()


def test_over_a_thousand_cases_ran():
    assert sum(calls.values()) >= 1000, calls


@pytest.mark.parametrize(
    ("field", "value"), [("temperature", 5), ("top_k", 2**31), ("stop", ["x" * 300]), ("tools", [{"type": "function"}])]
)
def test_the_local_agent_names_the_field_it_refuses(live, local_token_file, field, value):
    _, agent = live
    body = {"model": "any", "messages": [{"role": "user", "content": "hi"}], field: value}
    headers = {"Authorization": f"Bearer {local_token_file.read_text().strip()}"}
    answer = httpx.post(f"{agent}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert answer.status_code == 400, answer.text
    assert re.split(r"[.[]", answer.json()["error"]["param"])[0] == field


def test_the_local_agent_answers_in_the_gateways_words(live, local_token_file):
    """(a review) The local agent's 400s held pydantic's internals (`function-after[functools.partial(<function
    max_length_validator at 0x…>`), Python's (`maximum recursion depth exceeded`), and its 404s FastAPI's shape."""
    _, agent = live
    headers = {"Authorization": f"Bearer {local_token_file.read_text().strip()}", "Content-Type": "application/json"}
    ask = '{"model": "any", "messages": [{"role": "user", "content": "hi"}]'
    for body, field in ((ask + ', "stop": "\\ud800"}', "stop"), ('{"model": "any", "messages": [{"role": "user", '
                         '"content": "x\\ud800"}]}', "messages[0].content")):  # fmt: skip
        error = httpx.post(f"{agent}/v1/chat/completions", content=body, headers=headers, timeout=30).json()["error"]
        assert error["param"] == field and "0x" not in error["message"] and "function-after" not in error["message"]
    deep = "[" * 100_000 + "]" * 100_000
    error = httpx.post(f"{agent}/v1/chat/completions", content=deep, headers=headers, timeout=30).json()["error"]
    assert "could not be decoded as JSON" in error["message"] and "recursion" not in error["message"], error
    missing = httpx.get(f"{agent}/v1/nothing", headers=headers, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_url", missing.text


def test_the_local_agent_serves_tools_and_structured_output_as_the_gateway_does(live, local_token_file):
    _, agent = live
    headers = {"Authorization": f"Bearer {local_token_file.read_text().strip()}"}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": 0, "maximum": 999}}, "required": ["x"], "additionalProperties": False}}}  # fmt: skip
    body = {
        "model": "any",
        "messages": [{"role": "user", "content": "call f"}],
        "max_tokens": 60,
        "temperature": 0,
        "tools": [tool],
        "tool_choice": "required",
    }
    whole = httpx.post(f"{agent}/v1/chat/completions", json=body, headers=headers, timeout=30).json()
    (call,) = whole["choices"][0]["message"]["tool_calls"]
    assert whole["choices"][0]["finish_reason"] == "tool_calls" and isinstance(
        json.loads(call["function"]["arguments"])["x"], int
    )
    with httpx.stream("POST", f"{agent}/v1/chat/completions", json=body | {"stream": True}, headers=headers) as reply:
        events = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data: {")]
    deltas = [d for e in events for c in e["choices"] for d in c["delta"].get("tool_calls", [])]
    assert [d["function"]["name"] for d in deltas] == ["f"]
    schema = {"type": "json_schema", "json_schema": {"name": "o", "schema": tool["function"]["parameters"]}}
    shaped = {k: v for k, v in body.items() if k not in ("tools", "tool_choice")} | {"response_format": schema}
    answer = httpx.post(f"{agent}/v1/chat/completions", json=shaped, headers=headers, timeout=30).json()
    assert isinstance(json.loads(answer["choices"][0]["message"]["content"])["x"], int)


def test_the_local_agent_refuses_an_overflow_as_the_gateway_does_and_never_cuts_a_stream(live, local_token_file):
    _, agent = live
    headers = {"Authorization": f"Bearer {local_token_file.read_text().strip()}"}
    body = {"model": "any", "messages": [{"role": "user", "content": "hello world " * 3000}], "max_tokens": 8}
    for stream in (False, True):
        reply = httpx.post(f"{agent}/v1/chat/completions", json=body | {"stream": stream}, headers=headers, timeout=30)
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["code"] == "context_length_exceeded" and error["param"] == "messages"
    # a stream ends with [DONE], and carries usage only when stream_options.include_usage asks for it
    quiet = {"model": "any", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{agent}/v1/chat/completions", json=quiet, headers=headers, timeout=30) as reply:
        lines = [line for line in reply.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and not any('"usage"' in line for line in lines)  # no include_usage: none
    counted = quiet | {"stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{agent}/v1/chat/completions", json=counted, headers=headers, timeout=30) as reply:
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
    assert [e["usage"] is None for e in events] == [True] * (len(events) - 1) + [False]  # null until the last

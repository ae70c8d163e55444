"""A request's own fault is never a backend's fault: a flood of malformed requests leaves every breaker closed.

Through the gateway, each malformed request is a 4xx naming what is wrong. Sent straight to a worker (as a
client that skips the gateway's checks would), it is INVALID_ARGUMENT, which the gateway neither retries
elsewhere nor counts against the backend. Afterwards a public and a private request are both served.
"""

import asyncio
import contextlib
import json
import random
import socket
import time

import grpc
import httpx
import pytest

from proto.gen import worker_pb2, worker_pb2_grpc
from tests.stack import endpoint_of, start_stack

pytestmark = pytest.mark.integration
ASK = {"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
HUGE = "x" * 1_100_000


def malformed(rng: random.Random) -> tuple[str, dict | str]:
    """One malformed request body (a dict, or raw text), and what it gets wrong."""
    cases = [
        ("temperature", ASK | {"temperature": rng.choice([-1e-40, -1, 3, 2.0001, 1e308])}),
        ("priority", ASK | {"priority": rng.choice([2**31, -(2**31) - 1, 2**63])}),
        ("top_k", ASK | {"top_k": rng.choice([2**31, -1, 2**40])}),
        ("top_p", ASK | {"top_p": rng.choice([-0.01, -0.5, 1.5])}),
        ("stop", ASK | {"stop": ["s" * 300] * rng.randint(1, 4)}),
        ("stop", ASK | {"stop": ["a", "b", "c", "d", "e"]}),
        ("body", ASK | {"stop": [HUGE[: rng.randint(2_100_000 // 4, 1_100_000)]] * 4}),
        ("messages", ASK | {"messages": [{"role": "user", "content": "hi"}] * 3000}),
        ("max_tokens", ASK | {"max_tokens": rng.choice([0, -5, 10**9])}),
        ("json", '{"model": "tandem-demo", "temperature": NaN, "messages": [{"role": "user", "content": "hi"}]}'),
        ("json", '{"model": "tandem-demo", "messages": [' * 3),
    ]
    return rng.choice(cases)


async def flood(url: str, n: int) -> dict[int, int]:
    rng, statuses = random.Random(7), {}
    async with httpx.AsyncClient(timeout=30) as client:
        for start in range(0, n, 50):

            async def one(i):
                _, body = malformed(random.Random(rng.random() + i))
                if isinstance(body, str):
                    reply = await client.post(f"{url}/v1/chat/completions", content=body,
                                              headers={"Content-Type": "application/json"})  # fmt: skip
                else:
                    reply = await client.post(f"{url}/v1/chat/completions", json=body)
                return reply.status_code

            for status in await asyncio.gather(*(one(i) for i in range(start, min(n, start + 50)))):
                statuses[status] = statuses.get(status, 0) + 1
    return statuses


def direct(endpoint: str, sampling: worker_pb2.SamplingParams, prompt=(1, 2, 3)) -> grpc.StatusCode:
    channel = grpc.insecure_channel(endpoint.removeprefix("grpc://"))
    try:
        request = worker_pb2.GenerateRequest(request_id="bad", prompt_token_ids=prompt, sampling=sampling)
        list(worker_pb2_grpc.WorkerStub(channel).Generate(request, timeout=10))
    except grpc.RpcError as exc:
        return exc.code()
    finally:
        channel.close()
    return grpc.StatusCode.OK


@pytest.fixture(scope="module")
def stack(demo_checkpoint, tmp_path_factory):
    s = start_stack(demo_checkpoint, tmp_path_factory.mktemp("faults"))
    yield s
    s.stop()


def test_a_thousand_malformed_requests_get_4xx_and_trip_nothing(stack):
    statuses = asyncio.run(flood(stack.url, 1000))
    assert sum(statuses.values()) == 1000
    assert all(400 <= status < 500 for status in statuses), statuses
    for pool in ("cloud", "edge"):  # what a client that skips the gateway gets from each worker
        endpoint = endpoint_of(stack, pool)
        for sampling in (
            worker_pb2.SamplingParams(temperature=1e-40, max_tokens=2),
            worker_pb2.SamplingParams(temperature=float("nan"), max_tokens=2),
            worker_pb2.SamplingParams(top_p=float("nan"), max_tokens=2),
            worker_pb2.SamplingParams(max_tokens=10**6),
        ):
            assert direct(endpoint, sampling) == grpc.StatusCode.INVALID_ARGUMENT, (pool, sampling)
    backends = httpx.get(f"{stack.url}/readyz").json()["backends"]
    assert {b["circuit"] for b in backends.values()} == {"closed"}, backends
    public = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK, timeout=30)
    private = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK | {"metadata": {"privacy": "pii"}}, timeout=30)
    assert (public.status_code, private.status_code) == (200, 200)
    assert private.headers["x-tandem-route"] == "edge; rule=private"


def test_every_malformed_kind_names_its_field(stack):
    rng = random.Random(1)
    seen = {}
    for _ in range(200):
        what, body = malformed(rng)
        if isinstance(body, str) or what in seen:
            continue
        reply = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=30)
        seen[what] = (reply.status_code, json.loads(reply.text)["error"])
    for what, (status, error) in seen.items():
        if what == "body":
            assert status == 413 and error["code"] == "request_too_large"
        else:
            assert status == 400 and (error["param"] or "").startswith(what), (what, error)


# A choice first (the gateway's check stops walking there), then an object of 700 properties: the parser gives up on
# the worker, after the answer's first tokens, with a message of ~19 KB (its whole state and grammar)
LATE = {"type": "object", "required": ["a", "b"], "properties": {"a": {"enum": ["x", "y"]}, "b": {
    "type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(700)}}}}  # fmt: skip


@pytest.mark.parametrize("privacy", [None, "pii"])
def test_a_grammar_that_fails_on_the_worker_is_the_requests_fault_not_the_backends(stack, privacy):
    """(a review) A worker's status message of 19 KB crossed gRPC's 16 KiB limit on its headers and reached the
    gateway as RESOURCE_EXHAUSTED: a backend failure, retried on the edge and counted against both, so three such
    requests opened every breaker and every tenant, private ones included, got a 503."""
    fmt = {"type": "json_schema", "json_schema": {"name": "late", "schema": LATE}}
    body = ASK | {"max_tokens": 60, "temperature": 0, "response_format": fmt}
    body |= {"metadata": {"privacy": privacy}} if privacy else {}
    for _ in range(4):
        reply = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=60)
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["param"] == "response_format", reply.text
        assert "the grammar failed mid-answer" in error["message"] and len(error["message"]) < 600
    backends = httpx.get(f"{stack.url}/readyz").json()["backends"]
    assert {b["circuit"] for b in backends.values()} == {"closed"}, backends
    public = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK, timeout=30)
    private = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK | {"metadata": {"privacy": "pii"}}, timeout=30)
    assert (public.status_code, private.status_code) == (200, 200)


@pytest.mark.parametrize(
    ("metadata", "headers", "param", "meant"),
    [
        ({"privacy": "privat"}, {}, "metadata.privacy", "private"),
        ({}, {"X-Tandem-Privacy": "confidental"}, "X-Tandem-Privacy", "confidential"),
        ({"privacy": "pii"}, {"X-Tandem-Privacy": "Pi"}, "X-Tandem-Privacy", "pii"),
    ],
)
def test_a_misspelled_privacy_tag_is_refused_not_sent_to_the_cloud(stack, metadata, headers, param, meant):
    """Read as an unknown tag, "privat" would route as an untagged request does: to the cloud. The official client
    gets a 400 naming the field and the tag meant."""
    import openai

    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**ASK, metadata=metadata, extra_headers=headers)
    error = caught.value.body
    assert error["param"] == param and error["code"] == "unknown_privacy_tag", error
    assert f"(did you mean '{meant}'?)" in error["message"]
    assert "x-tandem-route" not in caught.value.response.headers  # refused before any decision
    typed = client.chat.completions.with_raw_response.create(**ASK, metadata={"privacy": "ｐｒｉｖａｔｅ"})
    assert typed.headers["x-tandem-route"] == "edge; rule=private"  # the tag as an IME types it is read


@pytest.mark.parametrize(
    ("headers", "status", "expect"),
    [
        # HTTP reads a repeated list header as one list: the second must not be dropped (it was, and an empty
        # first one routed the request to the cloud)
        ([("X-Tandem-Privacy", ""), ("X-Tandem-Privacy", "pii")], 200, "edge; rule=private"),
        ([("X-Tandem-Privacy", "confidential"), ("X-Tandem-Privacy", "nope")], 400, "'nope'"),
        ([("X-Tandem-Privacy", "機密".encode())], 400, "unknown privacy tag '機密'"),  # read as UTF-8, named as sent
        ([("X-Tandem-Privacy", b"\xff\xfe")], 400, "X-Tandem-Privacy is not valid UTF-8"),
        ([("X-Tandem-Device", '{"npu": true}'), ("X-Tandem-Device", '{"npu": false}')], 400, "sent 2 times"),
        ([("X-Tandem-Privcy", "pii")], 400, "unknown header X-Tandem-Privcy"),  # ignored, it would be untagged
        ([("X-Tandem-Route", "edge")], 400, "X-Tandem-Privacy, X-Tandem-Device"),  # a response header, sent back
        # found by a review: underscores (CGI stacks read them as dashes) and a missing X-, each ignored before
        ([("X_Tandem_Privacy", "pii")], 400, "unknown header X_Tandem_Privacy (did you mean X-Tandem-Privacy?)"),
        ([("X-Tandem_Privacy", "pii")], 400, "(did you mean X-Tandem-Privacy?)"),
        ([("Tandem-Privacy", "pii")], 400, "unknown header Tandem-Privacy (did you mean X-Tandem-Privacy?)"),
        ([("Privacy", "pii")], 400, "unknown header Privacy (did you mean X-Tandem-Privacy?)"),  # a second review
        ([("X-Privacy", "pii")], 400, "(did you mean X-Tandem-Privacy?)"),
        ([("X.Tandem.Privacy", "pii")], 400, "(did you mean X-Tandem-Privacy?)"),
        ([("X--Tandem-Privacy", "pii")], 400, "(did you mean X-Tandem-Privacy?)"),
    ],
)
def test_tandem_headers_as_clients_send_them(stack, headers, status, expect):
    reply = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK, headers=headers, timeout=30)
    assert reply.status_code == status, reply.text
    if status == 200:
        assert reply.headers["x-tandem-route"] == expect
    else:
        error = reply.json()["error"]
        assert expect in error["message"] and ("Tandem" in error["param"] or "Privacy" in error["param"]), error


@pytest.mark.parametrize("metadata", [{"Privacy": "pii"}, {"privcy": "pii"}, {"pii": "true"}, {"privacy_tags": "pii"}])
def test_a_metadata_key_meant_for_privacy_tags_is_a_400_naming_it(stack, metadata):
    """Read as any other metadata, {"Privacy": "pii"} would route as untagged: to the cloud."""
    reply = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK | {"metadata": metadata}, timeout=30)
    key = next(iter(metadata))
    assert reply.status_code == 400 and reply.json()["error"]["param"] == f"metadata.{key}", reply.text
    other = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK | {"metadata": {"priority": "x"}}, timeout=30)
    assert other.status_code == 200 and other.headers["x-tandem-route"] == "cloud; rule=default"


@pytest.mark.parametrize(
    "body",
    [
        '{"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], '
        '"metadata": {"privacy": "pii", "privacy": ""}}',
        '{"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], '
        '"metadata": {"privacy": "pii"}, "metadata": {}}',
        # found by a review: a name spelled with an escaped letter, and bodies in UTF-16 and UTF-32, which the
        # parser reads but a byte count does not
        '{"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], '
        '"metadata": {"privacy": "pii", "privac\\u0079": ""}}',
        '{"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], '
        '"metadata": {"privacy": "pii"}, "\\u006detadata": {}}',
        ("utf-16", '{"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], '
                   '"metadata": {"privacy": "pii", "privacy": ""}}'),
        ("utf-32", '{"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}], '
                   '"metadata": {"privacy": "pii", "privacy": ""}}'),
    ],
)  # fmt: skip
def test_a_body_naming_privacy_twice_is_refused(stack, body):
    """JSON keeps the last of repeated keys: read so, this request would be untagged."""
    encoding, body = body if isinstance(body, tuple) else ("utf-8", body)
    reply = httpx.post(f"{stack.url}/v1/chat/completions", content=body.encode(encoding),
                       headers={"Content-Type": "application/json"}, timeout=30)  # fmt: skip
    assert reply.status_code == 400 and "twice in one object" in reply.json()["error"]["message"], reply.text


FORCED = {"tool_choice": "required"}


@pytest.mark.parametrize(
    ("route", "body", "headers", "param"),
    [
        ("chat", ASK | {"response_format": {"type": ["json_object"]}}, {}, "response_format"),
        ("chat", ASK | {"response_format": {"type": {"a": 1}}}, {}, "response_format"),
        ("chat", ASK | {"response_format": {}}, {}, "response_format"),
        ("completions", {"model": "tandem-demo", "prompt": "hi", "max_tokens": 2,
                         "response_format": {"type": ["json_object"]}}, {}, "response_format"),
        ("explain", ASK | {"response_format": {"type": ["json_object"]}}, {}, "response_format"),
        ("chat", ASK | FORCED | {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "$defs": [1]}}}]}, {}, "tools"),
        ("chat", ASK | FORCED | {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "definitions": "abc"}}}]}, {}, "tools"),
        ("chat", ASK | {"tools": [{"type": "function", "function": {"name": "f", "description": "x\ud800"}}]},
         {}, "tools"),
        ("chat", ASK | {"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a\udc80": {"type": "string"}}}}}]}, {}, "tools"),
        ("chat", ASK | {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": "\udc80"}}}]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"}]}, {}, "messages"),
        ("chat", ASK, {"X-Tandem-Device": "1" * 5000}, "X-Tandem-Device"),
    ],
    ids=["type-list", "type-object", "type-missing", "completions-type-list", "explain-type-list", "defs-list",
         "definitions-string", "surrogate-description", "surrogate-property", "surrogate-arguments", "device-digits"],
)  # fmt: skip
def test_what_a_review_found_gives_a_400_naming_the_field_not_a_500(stack, route, body, headers, param):
    path = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "explain": "/v1/route/explain"}[route]
    raw = json.dumps(body).encode()  # lone surrogates as \\ud800 escapes, as a client that sends them writes them
    reply = httpx.post(f"{stack.url}{path}", content=raw, timeout=30,
                       headers={"Content-Type": "application/json", **headers})  # fmt: skip
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["param"] or "").startswith(param) and error["message"], error


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "g"}}])
def test_a_forced_calls_schema_that_cannot_compile_names_its_tool_not_the_grammar(stack, choice):
    """The call grammar's compile error quoted the whole grammar (the model's call syntax included) and named
    tool_choice; the fault is in the tool's parameters."""
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
        "a": {"$ref": "#/$defs/Nope"} if n == "g" else {"type": "string"}}}}} for n in ("f", "g")]  # fmt: skip
    reply = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK | {"tools": tools, "tool_choice": choice},
                       timeout=30)  # fmt: skip
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == "tools" and error["message"].startswith("tools[1].function.parameters: "), error
    assert "Nope" in error["message"] and "tool_call" not in error["message"] and "%json" not in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (ASK | {"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        (ASK | {"messages": [{"role": "user", "content": "x\ud800"}]}, "messages[0].content"),
        (ASK | {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "f", "arguments": {"a": "\udc80"}}}]}]}, "messages[0].tool_calls[0].function.arguments"),
    ],
)  # fmt: skip
def test_param_names_the_field_not_pydantics_union_member(stack, body, param):
    """pydantic's loc names the union member it tried (`function-after[functools.partial(<function ... at 0x...>)]`):
    the error names the field as the client wrote it, and no memory address."""
    reply = httpx.post(f"{stack.url}/v1/chat/completions", content=json.dumps(body).encode(), timeout=30,
                       headers={"Content-Type": "application/json"})  # fmt: skip
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == param, error
    assert "0x" not in error["message"] and "function-after" not in error["message"], error


STREAMED = ASK | {"stream": True}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    ("body", "param", "named"),
    [
        (STREAMED | {"stream_options": {"include_usage": False, "continuous_usage_stats": True}}, "stream_options",
         "continuous_usage_stats"),
        (STREAMED | {"stream_options": {"include_obfuscation": True}}, "stream_options", "include_obfuscation"),
        (ASK | {"tools": [TOOL | {"strict": True}]}, "tools", "tools[0]: unknown key strict"),
        (ASK | {"tools": [{"type": "function", "function": TOOL["function"] | {"cache_control": {"type": "x"}}}]},
         "tools", "tools[0].function: unknown key cache_control"),
    ],
    ids=["stream-options-vllm", "stream-options-obfuscation", "tool-level-strict", "function-cache-control"],
)  # fmt: skip
def test_a_field_that_would_be_ignored_is_refused_by_name(stack, body, param, named):
    reply = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=30)
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"].startswith(param) and named in error["message"], error


def test_an_assistants_earlier_refusal_is_part_of_the_prompt(stack):
    def prompt_tokens(turn: dict) -> int:
        body = ASK | {"messages": [{"role": "user", "content": "help me"}, turn, {"role": "user", "content": "why?"}]}
        reply = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=30)
        assert reply.status_code == 200, reply.text
        return reply.json()["usage"]["prompt_tokens"]

    plain = prompt_tokens({"role": "assistant", "content": ""})
    refused = prompt_tokens({"role": "assistant", "content": None, "refusal": "I will not help with that."})
    assert refused > plain  # it was dropped: the same count


@pytest.mark.parametrize(
    "headers", [{"Content-Type": "application/x-www-form-urlencoded"}, {"Content-Type": "text/plain"}]
)
def test_a_json_body_sent_as_a_form_is_told_to_send_json(stack, headers):
    """curl -d and requests.post(data=...) send a form's Content-Type: the 400 says what to send, not that the
    body is no object."""
    reply = httpx.post(f"{stack.url}/v1/chat/completions", content=json.dumps(ASK), headers=headers, timeout=30)
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "Content-Type", error
    assert "Content-Type: application/json" in error["message"] and headers["Content-Type"] in error["message"]


def test_a_number_split_between_a_turns_content_and_its_refusal_is_read_whole(stack):
    """The model reads an assistant's refusal right after its content; the scan read it after every message."""
    turn = {"role": "assistant", "content": "My card: 4111 1111", "refusal": "1111 1111"}
    body = ASK | {"messages": [turn, {"role": "user", "content": "thanks"}]}
    reply = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=30)
    assert reply.status_code == 200 and reply.headers["x-tandem-route"] == "edge; rule=private", reply.text


def test_a_body_in_latin_1_is_told_to_send_utf_8(stack):
    """A client that encodes its JSON in Latin-1 (an 'é' as the byte 0xe9) got FastAPI's 'There was an error
    parsing the body', which says nothing of why."""
    body = json.dumps(ASK | {"messages": [{"role": "user", "content": "café"}]}, ensure_ascii=False)
    reply = httpx.post(f"{stack.url}/v1/chat/completions", content=body.encode("latin-1"),
                       headers={"Content-Type": "application/json"}, timeout=30)  # fmt: skip
    assert reply.status_code == 400 and "UTF-8" in reply.json()["error"]["message"], reply.text
    assert reply.json()["error"]["code"] == "invalid_request"  # (a review) null, where a body no JSON said so
    huge = '{"model": "tandem-demo", "max_tokens": ' + "9" * 5000 + ', "messages": []}'
    reply = httpx.post(f"{stack.url}/v1/chat/completions", content=huge,
                       headers={"Content-Type": "application/json"}, timeout=30)  # fmt: skip
    assert reply.status_code == 400 and "4300 digits" in reply.json()["error"]["message"], reply.text


def test_head_is_answered_as_get_and_another_method_is_named(stack):
    """(a review) Uptime checkers send HEAD: /healthz, /readyz and /v1/models said 405. A method no route takes is a
    405 in OpenAI's error shape, its `code` named."""
    for path in ("/healthz", "/readyz", "/v1/models", "/v1/models/tandem-demo", "/v1/models/nope", "/metrics"):
        head = httpx.head(f"{stack.url}{path}", timeout=30)
        assert head.status_code == httpx.get(f"{stack.url}{path}", timeout=30).status_code and not head.content, path
    put = httpx.put(f"{stack.url}/v1/models", timeout=30)
    assert put.status_code == 405 and put.json()["error"]["code"] == "method_not_allowed", put.text


@pytest.mark.parametrize("items", [8000, 40000])  # 32 KB, and 160 KB: over LARGE_BODY_BYTES, validated in a thread
def test_a_body_with_thousands_of_bad_parts_gets_a_short_400(stack, items):
    """8,000 bad prompt items (32 KB) made a 1 MB message, built in a loop quadratic in the problems: seconds of
    the gateway's event loop, every request waiting, for one 400. A large body's 400 is the same, made off the loop.
    And a list is refused at its first wrong item (each was an error of its own, one per type tried: a review's
    2 MB of them held the interpreter 10 s)."""
    body = {"model": "tandem-demo", "prompt": [{}] * items}
    reply = httpx.post(f"{stack.url}/v1/completions", json=body, timeout=30)
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"].startswith("prompt"), error
    said = "prompt: Input should be a valid string; prompt[0]: Input should be a valid integer; prompt[0]: Input"
    assert error["message"].startswith(said) and len(error["message"]) < 300, error["message"]


def test_a_large_body_is_served_and_a_large_one_that_is_no_json_told_so(stack):
    big = "Tell me more about the gateway. " * 3000  # ~96 KB: validated in a thread
    reply = httpx.post(f"{stack.url}/v1/chat/completions", timeout=60,
                       json=ASK | {"messages": [{"role": "user", "content": big}], "max_tokens": 1})  # fmt: skip
    assert reply.status_code in (200, 400), reply.text  # served, or a prompt longer than the context: its own 400
    assert reply.status_code == 200 or reply.json()["error"]["code"] == "context_length_exceeded", reply.text
    broken = json.dumps(ASK | {"messages": [{"role": "user", "content": big}]})[:-2]
    reply = httpx.post(f"{stack.url}/v1/chat/completions", content=broken.encode(),
                       headers={"Content-Type": "application/json"}, timeout=30)  # fmt: skip
    assert reply.status_code == 400 and "JSON" in reply.json()["error"]["message"], reply.text


@pytest.mark.parametrize("field", ["temperature", "repetition_penalty"])
def test_the_documented_minimum_is_served(stack, field):
    """0.01 reached the worker as the float32 0.009999999776482582 and was refused there, 'at least 0.01'."""
    reply = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK | {field: 0.01}, timeout=60)
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    "metadata", [{f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}], ids=["17-keys", "65-char-key"]
)
def test_metadata_past_openais_limits_is_a_400_naming_it(stack, metadata):
    """170,000 metadata keys, each checked for a misspelt `privacy`, held the event loop for seconds."""
    reply = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK | {"metadata": metadata}, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "metadata", reply.text


@pytest.mark.parametrize("pool", ["cloud", "edge"])
def test_a_direct_clients_bad_ids_and_long_lists_are_its_own_fault_not_its_neighbours(stack, pool):
    """A token id the model has not, sent straight to a worker, raised IndexError on the engine thread, which failed
    every request in its batch (the others' streams ended `backend failed mid-answer`); 40,000 stop strings or
    300,000 biases slowed every other request 9-70x, read at each step (a review)."""
    endpoint = endpoint_of(stack, pool).removeprefix("grpc://")
    channel = grpc.insecure_channel(endpoint)
    try:
        neighbour = worker_pb2.GenerateRequest(request_id="neighbour", prompt_token_ids=[1, 309, 201],
            sampling=worker_pb2.SamplingParams(max_tokens=48, ignore_eos=True))  # fmt: skip
        stream = worker_pb2_grpc.WorkerStub(channel).Generate(neighbour, timeout=60)
        first = next(stream)  # the neighbour runs
        ok = worker_pb2.SamplingParams(max_tokens=2)
        for prompt in ([1, 2, 10**6], [1, -5, 3], [2**31 - 1]):
            assert direct(endpoint, ok, prompt) == grpc.StatusCode.INVALID_ARGUMENT, prompt
        for sampling in (
            worker_pb2.SamplingParams(max_tokens=2, stop_strings=["x"] * 40_000),
            worker_pb2.SamplingParams(max_tokens=2, stop_strings=["x" * 5000]),
            worker_pb2.SamplingParams(max_tokens=2, logit_bias={t: 1.0 for t in range(2000)}),
            worker_pb2.SamplingParams(max_tokens=2, logit_bias={10**6: 1.0}),
            worker_pb2.SamplingParams(max_tokens=2, stop_token_ids=[10**6]),
        ):
            assert direct(endpoint, sampling) == grpc.StatusCode.INVALID_ARGUMENT
        rest = list(stream)
        assert rest[-1].finish_reason == "length"
        assert len(first.token_ids) + sum(len(c.token_ids) for c in rest) == 48
    finally:
        channel.close()


def test_a_model_served_by_workers_with_a_short_kv_pool_is_sized_by_it(demo_checkpoint, tmp_path):
    """The gateway sized a request by the checkpoint's context (2,048) while its one worker's KV pool held 160
    tokens: a 60-token prompt without max_tokens got the worker's 400 about a max_tokens of 128 it never sent, and
    /v1/models said 2,048 (a review). Now the longest context a model's backends report bounds it."""
    from tests.conftest import free_port
    from tests.stack import start_gateway, start_worker_process, write_policy

    ports = [free_port(), free_port()]  # a cloud worker, and one more standing in the edge pool (never sent to here)
    workers = [
        start_worker_process(
            ["cloud-worker", "--model", str(demo_checkpoint), "--port", str(port), "--num-kv-blocks", "10"]
        )  # fmt: skip  (16-token blocks: 160 tokens)
        for port in ports
    ]
    gateway_port = free_port()
    try:
        gateway = start_gateway(demo_checkpoint, write_policy(tmp_path / "p.yaml", *ports), gateway_port)
        url = f"http://127.0.0.1:{gateway_port}"
        try:
            assert httpx.get(f"{url}/v1/models").json()["data"][0]["context_length"] == 160
            ask = {"model": "tandem-demo", "messages": [{"role": "user", "content": "tell " * 15}], "ignore_eos": True}
            answer = httpx.post(f"{url}/v1/chat/completions", json=ask, timeout=60)
            assert answer.status_code == 200, answer.text
            usage = answer.json()["usage"]
            assert usage["prompt_tokens"] + usage["completion_tokens"] == 160 and usage["completion_tokens"] < 128
            long = httpx.post(f"{url}/v1/chat/completions", timeout=60,
                              json=ask | {"messages": [{"role": "user", "content": "tell " * 60}]})  # fmt: skip
            assert long.status_code == 400 and long.json()["error"]["code"] == "context_length_exceeded"
            assert "160 tokens" in long.json()["error"]["message"]
        finally:
            gateway.stop()
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(timeout=15)


@pytest.mark.parametrize("method, path", [("POST", "/v1/chat/completions"), ("GET", "/healthz")])
def test_a_body_declared_past_the_limit_and_sent_at_a_trickle_does_not_hold_its_connection(stack, method, path):
    """(a review) A declared terabyte sent at 2 KB/s got its 413 (a GET its 200) and then had its body read and
    dropped for as long as the client liked, the connection held: a few thousand such held every descriptor. Now it
    is read on for LINGER_S at most (a client still sending would lose its answer to a close), then closed."""
    from serving.body_limit import LINGER_S

    host, port = stack.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {10**12}\r\n\r\n".encode())  # fmt: skip
        started, said = time.monotonic(), b""
        sock.settimeout(0.2)
        while time.monotonic() - started < LINGER_S + 10:
            with contextlib.suppress(OSError):
                sock.sendall(b"x" * 512)  # a trickle: 2.5 KB/s
            try:
                got = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not got:
                break  # closed by the gateway
            said += got
        else:
            pytest.fail(f"the connection was still open after {LINGER_S + 10:.0f} s: {said[:200]!r}")
    assert said.startswith(b"HTTP/1.1 413") and b"connection: close" in said.lower(), said[:300]
    assert b"request_too_large" in said


def test_a_body_just_over_the_limit_gets_its_413_read_whole(stack):
    """The answer waits for a body that ends within LINGER_S: a client that writes it all before reading (httpx,
    the openai client) would have lost the 413 to the reset of a connection closed with its bytes unread."""
    reply = httpx.post(f"{stack.url}/v1/chat/completions", json=ASK | {"stop": [HUGE] * 3}, timeout=30)
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "request_too_large"
    assert reply.headers.get("connection") != "close"


@pytest.mark.parametrize(("headers", "status"), [(b"Content-Length: 70000000", b"413"),
                                                 (b"Content-Length: 20\r\nContent-Encoding: gzip", b"415")])  # fmt: skip
def test_a_client_waiting_to_send_its_body_is_refused_before_it_sends_it(stack, headers, status):
    """(two reviews) `Expect: 100-continue` (curl past 1 MB, .NET, Java): reading on, the gateway asked for the body
    it had refused, and 64 MiB came before the 413 (a whole body before a 415). Answered at once now, no `100
    Continue` first."""
    host, port = stack.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\n" + headers + b"\r\n\r\n")  # fmt: skip
        said = sock.recv(4096)
    assert said.startswith(b"HTTP/1.1 " + status) and b"connection: close" in said.lower(), said[:200]

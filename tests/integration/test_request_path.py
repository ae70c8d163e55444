"""The whole request path with real processes, driven by the official openai client."""

import asyncio
import json
import os
import re
import time
from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from tokenizers import Tokenizer

from tests.stack import endpoint_of, start_stack

pytestmark = pytest.mark.integration
MODEL = "tandem-demo"
LONG_TEXT = "Tell me more about the gateway and its routing. " * 60  # > 512 tokens


@pytest.fixture(scope="module")
def stack(demo_checkpoint, tmp_path_factory, collector):
    s = start_stack(demo_checkpoint, tmp_path_factory.mktemp("stack"), collector.endpoint)
    yield s
    s.stop()


@pytest.fixture
def client(stack):
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)


def chat(client, content, **kwargs):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": content}], **kwargs
    )
    return raw.headers, raw.parse()


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list()] == [MODEL]


def test_private_request_is_answered_by_the_edge_agent(client, stack):
    headers, completion = chat(
        client, "My e-mail is ann@example.com", max_tokens=8, extra_body={"metadata": {"privacy": "pii"}}
    )
    assert headers["x-tandem-route"] == "edge; rule=private"
    assert headers["x-tandem-backend"] == endpoint_of(stack, "edge")
    assert completion.usage.completion_tokens >= 1 and completion.choices[0].finish_reason in ("stop", "length")


def test_privacy_header_is_honoured_too(client):
    headers, _ = chat(client, "hello", max_tokens=4, extra_headers={"X-Tandem-Privacy": "confidential"})
    assert headers["x-tandem-route"] == "edge; rule=private"


def test_long_request_is_answered_by_the_cloud_worker(client, stack):
    headers, completion = chat(client, LONG_TEXT, max_tokens=8, extra_headers={"X-Tandem-Device": '{"npu": true}'})
    assert headers["x-tandem-route"] == "cloud; rule=default"
    assert headers["x-tandem-backend"] == endpoint_of(stack, "cloud")
    assert completion.usage.prompt_tokens > 512


def test_a_repeated_prompt_is_served_from_the_cloud_workers_prefix_cache(client):
    prompt = "Summarise this for me: " + LONG_TEXT[:600]
    _, first = chat(client, prompt, max_tokens=4, temperature=0)
    _, again = chat(client, prompt, max_tokens=4, temperature=0)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    # Every full 16-token block but the one holding the last prompt token comes from the cache.
    assert again.usage.prompt_tokens_details.cached_tokens == (again.usage.prompt_tokens - 1) // 16 * 16 > 0
    assert again.choices[0].message.content == first.choices[0].message.content


def test_short_request_from_an_npu_device_stays_on_the_edge(client):
    headers, _ = chat(client, "hi", max_tokens=4, extra_headers={"X-Tandem-Device": '{"npu": true}'})
    assert headers["x-tandem-route"] == "edge; rule=short-on-capable-device"


@pytest.mark.parametrize("privacy", [None, "pii"], ids=["cloud", "edge"])
def test_streaming_and_non_streaming_agree(client, privacy):
    kwargs = dict(
        model=MODEL, messages=[{"role": "user", "content": "Name three colours."}], max_tokens=24, temperature=0
    )
    if privacy:
        kwargs["extra_body"] = {"metadata": {"privacy": privacy}}
    whole = client.chat.completions.create(**kwargs)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        whole.choices[0].finish_reason
    ]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


@pytest.mark.parametrize("path", ["chat/completions", "completions"])
def test_with_include_usage_every_chunk_has_a_usage_key_null_until_the_last(stack, path):
    """OpenAI's: all chunks but the usage one carry "usage": null (a client reading chunk["usage"] found no key)."""
    body = {"model": MODEL, "max_tokens": 6, "stream": True, "stream_options": {"include_usage": True}, "n": 2}
    body |= {"messages": [{"role": "user", "content": "hi"}]} if path.startswith("chat") else {"prompt": "hi"}
    with httpx.stream("POST", f"{stack.url}/v1/{path}", json=body, timeout=30) as reply:
        events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
    assert [e["usage"] is None for e in events] == [True] * (len(events) - 1) + [False]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 12


def test_text_completions_stream_and_whole_agree(client):
    whole = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=12, temperature=0)
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model=MODEL, prompt="The quick brown fox", max_tokens=12, temperature=0, stream=True
        )
    )
    assert streamed == whole.choices[0].text and whole.usage.completion_tokens == 12


def test_same_seed_same_answer_on_both_kinds(client):
    for extra in ({}, {"metadata": {"privacy": "private"}}):
        answers = {
            chat(client, "Pick a word.", max_tokens=16, temperature=1.0, seed=1234, extra_body=extra)[1]
            .choices[0]
            .message.content
            for _ in range(2)
        }
        assert len(answers) == 1


def test_a_temperature_under_the_floor_is_served_as_the_floor(client):
    """OpenAI takes any temperature in [0, 2], and harnesses send 1e-5 for "all but greedy": served as 0.01 (as vLLM
    does), so with one seed the same answer as 0.01 itself."""
    answers = {
        chat(client, "Pick a word.", max_tokens=8, temperature=t, seed=7)[1].choices[0].message.content
        for t in (1e-5, 0.001, 0.01)
    }
    assert len(answers) == 1


def test_max_tokens_and_stop_are_honoured(client):
    _, whole = chat(client, "Go on.", max_tokens=10, temperature=0)
    assert whole.usage.completion_tokens == 10 and whole.choices[0].finish_reason == "length"
    text = whole.choices[0].message.content
    stop = next(text[i : i + 3] for i in range(1, len(text) - 2) if text[i : i + 3].strip())
    _, cut = chat(client, "Go on.", max_tokens=10, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    "kwargs, error, status, code, param",
    [
        (dict(model="no-such-model"), openai.NotFoundError, 404, "model_not_found", "model"),
        (dict(model="m" * 60_000), openai.NotFoundError, 404, "model_not_found", "model"),  # (said in 128, not whole)
        (dict(temperature=5), openai.BadRequestError, 400, "invalid_request", "temperature"),
        (dict(max_tokens=0), openai.BadRequestError, 400, "invalid_request", "max_tokens"),
        (dict(top_logprobs=2), openai.BadRequestError, 400, "invalid_request", "top_logprobs"),  # needs logprobs
        (dict(n=9), openai.BadRequestError, 400, "invalid_request", "n"),  # over TANDEM_MAX_N (8)
        (
            dict(extra_body={"functions": [{"name": "f"}]}),
            openai.BadRequestError,
            400,
            "invalid_request",
            "functions",
        ),
        (dict(max_tokens=2040), openai.BadRequestError, 400, "context_length_exceeded", "messages"),
        (
            dict(messages=[{"role": "user", "content": "tell me more. " * 240}]),
            openai.BadRequestError,
            400,
            "context_length_exceeded",
            "messages",
        ),
        (
            dict(extra_headers={"X-Tandem-Device": "{not json"}),
            openai.BadRequestError,
            400,
            "invalid_request",
            "X-Tandem-Device",
        ),
        (dict(extra_body={"no_such_field": 1}), openai.BadRequestError, 400, "invalid_request", "no_such_field"),
        (
            dict(messages=[{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1", "content": "x"}]),
            openai.BadRequestError,
            400,
            "invalid_request",
            "messages",
        ),
    ],
    ids=[
        "unknown-model",
        "an-id-of-60-KB",
        "temperature",
        "max-tokens",
        "top-logprobs-alone",
        "n",
        "functions",
        "too-long",
        "prompt-fills-context",
        "bad-device-header",
        "unknown-field",
        "tool-answer-without-a-call",
    ],
)
def test_bad_input_gets_an_openai_shaped_error(client, kwargs, error, status, code, param):
    kwargs = {"model": MODEL, "messages": [{"role": "user", "content": "hi " * 20}], **kwargs}
    with pytest.raises(error) as err:
        client.chat.completions.create(**kwargs)
    assert err.value.status_code == status
    body = err.value.response.json()["error"]
    assert body["message"] and body["type"] and body["code"] == code and body["param"] == param
    assert len(body["message"]) < 1000  # a caller's 60 KB model id came back whole (a review)


def test_a_request_id_is_echoed_or_made_and_the_trace_id_returned(stack):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    mine = httpx.post(f"{stack.url}/v1/chat/completions", json=body, headers={"X-Request-Id": "abc-123"})
    assert mine.status_code == 200 and mine.headers["x-request-id"] == "abc-123"
    assert len(mine.headers["x-trace-id"]) == 32 and int(mine.headers["x-trace-id"], 16)
    made = httpx.post(f"{stack.url}/v1/chat/completions", json=body | {"stream": True})
    assert made.headers["x-request-id"].startswith("req-") and made.headers["x-trace-id"] != mine.headers["x-trace-id"]
    refused = httpx.post(f"{stack.url}/v1/chat/completions", json=body, headers={"X-Request-Id": "two words"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "X-Request-Id"
    assert refused.json()["error"]["code"] == "invalid_request" and refused.headers["x-request-id"].startswith("req-")
    errored = httpx.post(f"{stack.url}/v1/chat/completions", json=body | {"model": "x"}, headers={"X-Request-Id": "e1"})
    assert errored.status_code == 404 and errored.headers["x-request-id"] == "e1"


def test_malformed_json_is_a_400_not_a_stack_trace(stack):
    response = httpx.post(
        f"{stack.url}/v1/chat/completions", content=b"{bad", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]["message"]
    assert "Traceback" not in response.text


def test_one_trace_spans_gateway_grpc_and_worker(client, collector):
    trace_id = os.urandom(16).hex()
    traceparent = f"00-{trace_id}-{os.urandom(8).hex()}-01"
    chat(client, LONG_TEXT, max_tokens=4, extra_headers={"traceparent": traceparent})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # each process exports in its own batches: wait for the linking span too
        spans = collector.trace(trace_id)
        servers = [s for s in spans if s.service == "tandem-cloud-worker" and "Generate" in s.name]
        if servers and servers[0].parent_span_id in {s.span_id for s in spans if s.service == "tandem-gateway"}:
            break
        time.sleep(0.1)
    services = {s.service for s in spans}
    assert {"tandem-gateway", "tandem-cloud-worker"} <= services, services
    names = {s.name for s in spans}
    assert "gateway.backend_call" in names
    server = next(s for s in spans if s.service == "tandem-gateway" and s.name.startswith("POST "))
    assert {"tandem.stage_us.tokenize", "tandem.stage_us.classify", "tandem.stage_us.route_plan"} <= set(
        server.attributes
    )  # the stages, on the request's span (TANDEM_TRACE_STAGES=true: a span each)
    worker_server = next(s for s in spans if s.service == "tandem-cloud-worker" and "Generate" in s.name)
    gateway_ids = {s.span_id for s in spans if s.service == "tandem-gateway"}
    assert worker_server.parent_span_id in gateway_ids  # the gRPC client span in the gateway
    assert worker_server.attributes["tandem.worker.kind"] == "cloud"
    assert worker_server.attributes["tandem.execution_provider"] == "torch-cpu"
    assert any(s.attributes.get("tandem.rule") == "default" for s in spans if s.service == "tandem-gateway")


def test_edge_trace_says_which_execution_provider_ran(client, collector):
    trace_id = os.urandom(16).hex()
    chat(
        client,
        "hi",
        max_tokens=2,
        extra_body={"metadata": {"privacy": "pii"}},
        extra_headers={"traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-01"},
    )
    deadline = time.monotonic() + 10
    while not (
        edge := [s for s in collector.trace(trace_id) if s.service == "tandem-edge-agent" and "Generate" in s.name]
    ):
        assert time.monotonic() < deadline, "no edge-agent span arrived"
        time.sleep(0.1)
    assert edge[0].attributes["tandem.execution_provider"] == "CPUExecutionProvider"
    assert edge[0].attributes["tandem.worker.kind"] == "edge"


@pytest.mark.parametrize(
    "content",
    [
        "Mail me at ann.lee@example.com",
        "My card is 4111 1111 1111 1111",
        "IBAN DE89 3704 0044 0532 0130 00",
        "My SSN is 123-45-6789",
        "Contact: lee [at] cs [dot] stanford [dot] edu",
    ],
    ids=["email", "card", "iban", "ssn", "written-out-email"],
)
def test_detected_pii_keeps_an_untagged_request_on_the_edge(client, content):
    headers, _ = chat(client, content, max_tokens=2)
    assert headers["x-tandem-route"] == "edge; rule=private"


def test_an_ssn_sent_over_two_messages_keeps_the_request_on_the_edge(client):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, max_tokens=2,
        messages=[{"role": "user", "content": "My SSN is 123-45-"}, {"role": "user", "content": "6789"}],
    )  # fmt: skip
    assert raw.headers["x-tandem-route"] == "edge; rule=private"


def test_a_call_arguments_object_with_an_ssn_under_a_later_key_stays_on_the_edge(stack):
    """The gateway takes a call's arguments as an object too; its keys were read before all its values, so an `ssn`
    that was not the first key ended lines from its number and the request went to the cloud (a review)."""
    call = {"id": "c1", "type": "function", "function": {"name": "update", "arguments": {"name": "Ann Lee",
            "dob": "1990-01-01", "ssn": "123456789"}}}  # fmt: skip
    body = {"model": MODEL, "max_tokens": 2, "messages": [
        {"role": "user", "content": "Update my record"}, {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"}, {"role": "user", "content": "Thanks"}]}  # fmt: skip
    response = httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers["x-tandem-route"] == "edge; rule=private"


def test_token_id_prompts_are_scanned_too(client, demo_checkpoint):
    from serving.checkpoint import load_tokenizer

    tokenizer = load_tokenizer(demo_checkpoint)
    ids = tokenizer.encode("write to ann@example.com").ids
    raw = client.completions.with_raw_response.create(model=MODEL, prompt=ids, max_tokens=2)
    assert raw.headers["x-tandem-route"] == "edge; rule=private"
    # a special token beside the data parts it as the model reads it; dropped, the card read as 17 digits (a review)
    eos = tokenizer.token_to_id("<|endoftext|>")
    card = tokenizer.encode("card 4111 1111 1111 1111").ids + [eos] + tokenizer.encode("1").ids
    for prompt in (card, [tokenizer.encode("hello").ids, card]):
        raw = client.completions.with_raw_response.create(model=MODEL, prompt=prompt, max_tokens=2)
        assert raw.headers["x-tandem-route"] == "edge; rule=private"


def test_a_turn_after_one_ending_in_many_numbers_is_read_on_its_own(client):
    """Turns are joined by a line break for the scan, and a number's groups are read from its first eight only:
    a phone number starting a turn after `3 7 12 19 23 31 42 45` was missed (a review)."""
    headers, _ = chat_turns(client, ["Numbers: 3 7 12 19 23 31 42 45", "415 555 0100 is mine"])
    assert headers["x-tandem-route"] == "edge; rule=private"


def chat_turns(client, contents):
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, max_tokens=2, messages=[{"role": "user", "content": c} for c in contents]
    )
    return raw.headers, raw.parse()


def test_edge_registration_is_off_without_a_token(stack):
    response = httpx.post(f"{stack.url}/v1/edge/register", json={})
    assert response.status_code == 404
    assert "TANDEM_EDGE_TOKEN" in response.json()["error"]["message"]


def test_metrics_carry_tenants_token_timing_and_autoscaling_signals(client, stack):
    chat(client, LONG_TEXT, max_tokens=4)
    text = httpx.get(f"{stack.url}/metrics").text
    assert re.search(r'^tandem_gateway_requests_total\{.*tenant="default".*\} [1-9]', text, re.M)
    assert re.search(
        r'^tandem_gateway_completion_tokens_total\{pool="cloud",rule="default",tenant="default"\} [1-9]', text, re.M
    )
    assert re.search(r'^tandem_gateway_time_per_output_token_seconds_count\{pool="cloud"\} [1-9]', text, re.M)
    assert re.search(r'^tandem_gateway_ttft_p90_seconds\{pool="cloud"\} ', text, re.M)
    saturation = float(re.search(r'^tandem_autoscale_saturation\{pool="cloud"\} (\S+)$', text, re.M).group(1))
    assert 0 < saturation < 1  # one idle worker: the TTFT signal is the largest, and under its 2 s target
    assert re.search(r'^tandem_gateway_backend_circuit_state\{backend="grpc://[^"]+",state="closed"\} 1.0$', text, re.M)


# Both kinds of backend: the cloud worker (long prompt) and the edge agent (private).
KINDS = {"cloud": {"content": LONG_TEXT}, "edge": {"content": "Go on.", "extra_body": {"metadata": {"privacy": "pii"}}}}


def kind_chat(client, kind, **kwargs):
    spec = dict(KINDS[kind])
    extra_body = spec.pop("extra_body", {}) | kwargs.pop("extra_body", {})
    headers, completion = chat(client, spec["content"], extra_body=extra_body, **kwargs)
    assert headers["x-tandem-route"].split(";")[0] == kind
    return completion


def kind_stream(client, kind, **kwargs):
    """As kind_chat, streamed: the chunks."""
    spec = KINDS[kind]
    messages = [{"role": "user", "content": spec["content"]}]
    return client.chat.completions.create(
        model=MODEL, messages=messages, stream=True, extra_body=spec.get("extra_body"), **kwargs
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_logprobs_whole_and_streamed_name_each_answer_token(client, kind):
    completion = kind_chat(client, kind, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    content = completion.choices[0].logprobs.content
    assert len(content) == completion.usage.completion_tokens == 8
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.top_logprobs[0].token == entry.token  # greedy picks the most likely token
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-4
        assert entry.token == bytes(entry.bytes).decode(errors="replace") or "\ufffd" in entry.token
    assert "".join(e.token for e in content) == completion.choices[0].message.content
    assert b"".join(bytes(e.bytes) for e in content).decode(errors="replace") == completion.choices[0].message.content
    stream = kind_stream(client, kind, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    streamed = [e for chunk in stream for c in chunk.choices if c.logprobs for e in c.logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in streamed] == [(e.token, round(e.logprob, 4)) for e in content]


def _ascii_middle(text: str) -> str:
    """Three printable ASCII characters from the middle on, first seen there (the demo model's answers hold invalid
    UTF-8 too, where the tokens of one U+FFFD run share a start)."""
    for at in range(len(text) // 2, len(text) - 2):
        stop = text[at : at + 3]
        if stop.isascii() and stop.isprintable() and text.index(stop) == at:
            return stop
    raise AssertionError(f"no ASCII stop string in {text!r}")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_tool_calls_tokens_are_not_reported_as_log_probabilities(client, kind):
    """A call's tokens are the model's call syntax (<tool_call>{"name": ...}), which the answer never shows: the
    log-probabilities describe the content, none here, whole and streamed."""
    called = kind_chat(client, kind, max_tokens=80, temperature=0, tools=[WEATHER_TOOL], tool_choice="required",
                       logprobs=True, top_logprobs=2)  # fmt: skip
    choice = called.choices[0]
    assert choice.message.tool_calls and choice.message.content is None
    assert choice.logprobs.content == [], choice.logprobs
    stream = kind_stream(client, kind, max_tokens=80, temperature=0, tools=[WEATHER_TOOL], tool_choice="required",
                         logprobs=True, top_logprobs=2)  # fmt: skip
    chunks = list(stream)
    assert any(d.tool_calls for c in chunks for d in (x.delta for x in c.choices))
    assert [e for c in chunks for x in c.choices if x.logprobs for e in x.logprobs.content] == []
    free = kind_chat(client, kind, max_tokens=8, temperature=0, tools=[WEATHER_TOOL], tool_choice="none",
                     logprobs=True)  # fmt: skip
    assert "".join(e.token for e in free.choices[0].logprobs.content) == free.choices[0].message.content


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_logprobs_end_where_a_stop_string_cut_the_text(client, kind):
    """The tokens of a matched stop string are scored before it can be seen, and must not be reported: the
    log-probabilities describe the returned text, whole and streamed."""
    free = kind_chat(client, kind, max_tokens=24, temperature=0).choices[0].message.content
    stop = _ascii_middle(free)
    cut = kind_chat(client, kind, max_tokens=24, temperature=0, stop=stop, logprobs=True)
    text = cut.choices[0].message.content
    assert text == free[: free.index(stop)]
    entries = cut.choices[0].logprobs.content
    said = b"".join(bytes(e.bytes) for e in entries).decode(errors="replace")
    assert said.startswith(text) and len(b"".join(bytes(e.bytes) for e in entries[:-1]).decode(errors="replace")) < len(
        text
    ), (text, said)  # every returned character is covered, and no token past them is reported
    streamed = kind_stream(client, kind, max_tokens=24, temperature=0, stop=stop, logprobs=True)
    entries_streamed = [e for chunk in streamed for c in chunk.choices if c.logprobs for e in c.logprobs.content]
    assert [e.token for e in entries_streamed] == [e.token for e in entries]
    legacy = client.completions.create(model=MODEL, prompt=free[:20], max_tokens=24, temperature=0, logprobs=1)
    legacy_text = legacy.choices[0].text
    legacy_stop = _ascii_middle(legacy_text)
    cut_legacy = client.completions.create(
        model=MODEL, prompt=free[:20], max_tokens=24, temperature=0, logprobs=1, stop=legacy_stop
    ).choices[0]
    assert cut_legacy.text == legacy_text[: legacy_text.index(legacy_stop)]
    uncut = legacy.choices[0].logprobs  # the same tokens, to the cut: those whose text begins before it
    kept = [(t, o) for t, o in zip(uncut.tokens, uncut.text_offset, strict=True) if o < len(cut_legacy.text)]
    assert list(zip(cut_legacy.logprobs.tokens, cut_legacy.logprobs.text_offset, strict=True)) == kept


def test_completions_logprobs_have_openais_legacy_shape(client):
    whole = client.completions.create(
        model=MODEL, prompt="The quick brown fox", max_tokens=6, temperature=0, logprobs=2
    )
    lp = whole.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert all(len(top) <= 2 and token in top for token, top in zip(lp.tokens, lp.top_logprobs, strict=True))
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(6)]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_penalties_and_logit_bias_change_the_greedy_answer_on_both_kinds(client, kind, demo_checkpoint):
    plain = kind_chat(client, kind, max_tokens=12, temperature=0, logprobs=True)
    first = plain.choices[0].logprobs.content[0].token
    ids = Tokenizer.from_file(str(demo_checkpoint / "tokenizer.json")).encode(first, add_special_tokens=False).ids
    assert len(ids) == 1
    banned = kind_chat(client, kind, max_tokens=12, temperature=0, logprobs=True, logit_bias={str(ids[0]): -100})
    assert banned.choices[0].logprobs.content[0].token != first
    assert all(e.token != first for e in banned.choices[0].logprobs.content)
    longer = kind_chat(client, kind, max_tokens=32, temperature=0, logprobs=True)
    penalized = kind_chat(client, kind, max_tokens=32, temperature=0, frequency_penalty=2.0, presence_penalty=2.0)
    repeated = kind_chat(client, kind, max_tokens=32, temperature=0, extra_body={"repetition_penalty": 3.0})
    assert penalized.choices[0].message.content != longer.choices[0].message.content, longer.choices[0].logprobs
    assert repeated.choices[0].message.content != longer.choices[0].message.content


def test_fields_that_cannot_change_the_answer_are_accepted_and_others_named(client):
    _, accepted = chat(
        client, "hi", max_tokens=2, store=False, service_tier="auto", user="u1",
        prompt_cache_key="k", prompt_cache_retention="in_memory",
    )  # fmt: skip
    assert accepted.choices[0].finish_reason in ("stop", "length")
    # (a review) OpenAI's OpenAPI document spelt it `in-memory` for a while: clients built from it send that
    _, spelt = chat(client, "hi", max_tokens=2, extra_body={"prompt_cache_retention": "in-memory"})
    assert spelt.choices[0].finish_reason in ("stop", "length")
    refused = [{"store": True}, {"functions": [{"name": "f"}]}, {"best_of": 2}, {"prompt_cache_retention": "24h"}]
    for extra in refused + [{"parallel_tool_calls": True}]:  # without tools, as OpenAI refuses it
        with pytest.raises(openai.BadRequestError) as err:
            chat(client, "hi", max_tokens=2, extra_body=extra)
        assert err.value.response.json()["error"]["param"] == next(iter(extra))


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=150)
    kind: Literal["cloud", "edge"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_openai_clients_parse_gets_a_valid_object_from_both_kinds(client, kind):
    spec = dict(KINDS[kind])
    for temperature in (0, 1.0):
        raw = client.beta.chat.completions.with_raw_response.parse(
            model=MODEL,
            messages=[{"role": "user", "content": spec["content"]}],
            response_format=Person,
            max_tokens=120,
            temperature=temperature,
            seed=7,
            extra_body=spec.get("extra_body"),
        )
        assert raw.headers["x-tandem-route"].split(";")[0] == kind
        parsed = raw.parse().choices[0].message.parsed
        assert isinstance(parsed, Person), raw.parse().choices[0].message.content
    # Any object: a small model may wander in a string until max_tokens ("length", cut as OpenAI cuts it); every
    # answer that ends by itself parses.
    finished = []
    for seed in range(6):
        answer = kind_chat(
            client, kind, max_tokens=120, temperature=1.0, seed=seed, response_format={"type": "json_object"}
        )
        choice = answer.choices[0]
        assert choice.message.content.startswith("{")
        if choice.finish_reason == "stop":
            finished.append(json.loads(choice.message.content))
    assert finished and all(isinstance(obj, dict) for obj in finished)
    with pytest.raises(openai.BadRequestError) as err:
        kind_chat(client, kind, max_tokens=8, response_format={"type": "json_schema", "json_schema": {"schema": 5}})
    assert err.value.response.json()["error"]["param"] == "response_format"


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
FORCED = {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_stop_string_never_cuts_a_forced_call(client, kind):
    """(a review) `stop: ["\\n"]` cut the forced call's markup after `<tool_call>` and returned that as the answer's
    text, with no call, where tool_choice required one. `stop` ends text; a forced answer is a call."""
    asked = {"max_tokens": 80, "temperature": 0, "tools": [WEATHER_TOOL], "stop": ["\n", ":", "{"]}
    for choice in ("required", FORCED):
        answer = kind_chat(client, kind, tool_choice=choice, **asked).choices[0]
        assert not answer.message.content and answer.message.tool_calls[0].function.name == "get_weather", answer
        chunks = list(kind_stream(client, kind, tool_choice=choice, **asked))
        assert [
            d.function.name for c in chunks for x in c.choices for d in x.delta.tool_calls or [] if d.function.name
        ] == ["get_weather"]
        assert not "".join(x.delta.content or "" for c in chunks for x in c.choices)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_forced_tool_call_comes_back_as_tool_calls_whole_and_streamed(client, kind):
    answer = kind_chat(client, kind, max_tokens=80, temperature=0, tools=[WEATHER_TOOL], tool_choice=FORCED)
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.content  # named: asked for, as OpenAI's says
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])
    stream = kind_stream(client, kind, max_tokens=80, temperature=0, tools=[WEATHER_TOOL], tool_choice="required")
    deltas, reasons = [], []
    for chunk in stream:
        for c in chunk.choices:
            deltas += c.delta.tool_calls or []
            reasons.append(c.finish_reason)
    assert [d.function.name for d in deltas] == ["get_weather"] and reasons[-1] == "tool_calls"
    named = kind_stream(client, kind, max_tokens=80, temperature=0, tools=[WEATHER_TOOL], tool_choice=FORCED)
    assert [c.finish_reason for chunk in named for c in chunk.choices][-1] == "stop"  # streamed as whole
    jsonschema.validate(json.loads(deltas[0].function.arguments), WEATHER_TOOL["function"]["parameters"])
    # The client's stream helper adds the deltas up to the message the whole answer has: content null, not "".
    spec = KINDS[kind]
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": spec["content"]}], max_tokens=80, temperature=0,
        tools=[WEATHER_TOOL], tool_choice="required", extra_body=spec.get("extra_body"),
    ) as helper:  # fmt: skip
        kinds = {event.type for event in helper}
        final = helper.get_final_completion().choices[0].message
    assert final.content is None and "content.delta" not in kinds and final.tool_calls[0].function.name == "get_weather"
    # The call and its result go back to the model as the next turn's history.
    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'},
    ]
    extra_body = KINDS[kind].get("extra_body")
    follow = client.chat.completions.create(
        model=MODEL, messages=history, max_tokens=8, tools=[WEATHER_TOOL], extra_body=extra_body
    )
    without = client.chat.completions.create(
        model=MODEL, messages=history[:1], max_tokens=8, tools=[WEATHER_TOOL], extra_body=extra_body
    )
    # the model reads the call and its result: both are in the prompt
    call_tokens = len(call.function.arguments) // 8  # at the very least
    assert follow.usage.prompt_tokens > without.usage.prompt_tokens + call_tokens


def test_the_openai_clients_own_messages_go_back_as_history(client):
    """What agent loops append: `message.model_dump()` (audio, function_call null, annotations), a parse() result
    (parsed, parsed_arguments) and a refusal part. Each is read as OpenAI reads it, none is a 400."""
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    dumped = (
        client.chat.completions.create(
            model=MODEL, messages=ask, max_tokens=80, temperature=0, tools=[WEATHER_TOOL], tool_choice=FORCED
        )
        .choices[0]
        .message
    )
    assert {"audio", "function_call", "annotations"} <= dumped.model_dump().keys()
    tool = openai.pydantic_function_tool(Weather, name="get_weather")
    parsed = (
        client.chat.completions.parse(
            model=MODEL, messages=ask, max_tokens=80, temperature=0, tools=[tool], tool_choice="required"
        )
        .choices[0]
        .message
    )
    assert parsed.tool_calls[0].function.parsed_arguments is not None
    alone = client.chat.completions.create(model=MODEL, messages=ask, max_tokens=2, tools=[WEATHER_TOOL])
    for message in (dumped.model_dump(), parsed):
        history = [*ask, message, {"role": "tool", "tool_call_id": message_calls(message)[0], "content": "21 C"}]
        follow = client.chat.completions.create(model=MODEL, messages=history, max_tokens=2, tools=[WEATHER_TOOL])
        assert follow.usage.prompt_tokens > alone.usage.prompt_tokens  # the call and its result are read

    # a refusal part is what the assistant said, as a refusal field is
    def prompt_tokens(turn: dict) -> int:
        history = [*ask, turn, {"role": "user", "content": "why?"}]
        return client.chat.completions.create(model=MODEL, messages=history, max_tokens=1).usage.prompt_tokens

    as_field = prompt_tokens({"role": "assistant", "content": None, "refusal": "I will not."})
    as_part = prompt_tokens({"role": "assistant", "content": [{"type": "refusal", "refusal": "I will not."}]})
    assert as_part == as_field > prompt_tokens({"role": "assistant", "content": ""})
    with pytest.raises(openai.BadRequestError) as err:  # not a user's: refused by name
        prompt_tokens({"role": "user", "content": [{"type": "refusal", "refusal": "no"}]})
    assert "refusal" in err.value.response.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as err:  # an answer's fields on a user's message
        prompt_tokens({"role": "user", "content": "hi", "parsed": {"a": 1}})
    assert "only an assistant's message" in err.value.response.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as err:  # an earlier audio answer: there is none to read
        prompt_tokens({"role": "assistant", "content": "hi", "audio": {"id": "audio_1"}})
    assert err.value.response.json()["error"]["param"].endswith("audio")


def test_tools_the_model_may_call_beside_a_response_format_give_a_call_or_the_shaped_answer(client, demo_checkpoint):
    """OpenAI's agent set-up: tools, and a typed final answer. response_format shapes the text answer, not the turn:
    the model may still call a tool (the answer's grammar allowed only the JSON). A forced call with a
    response_format is the call."""
    tokenizer = Tokenizer.from_file(str(demo_checkpoint / "tokenizer.json"))
    call_start, answer_start = tokenizer.encode("<tool_call>").ids[0], tokenizer.encode("{").ids[0]
    ask = dict(model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}], max_tokens=120)
    tool = openai.pydantic_function_tool(Weather, name="get_weather")  # strict: what parse() takes
    shaped = ask | dict(tools=[tool], response_format=Person, temperature=0)
    # one call (a bias on every step would otherwise start call after call until max_tokens)
    called = client.chat.completions.parse(**shaped, logit_bias={str(call_start): 100}, parallel_tool_calls=False)
    called = called.choices[0]
    assert called.finish_reason == "tool_calls" and called.message.tool_calls, called.message
    assert all(isinstance(call.function.parsed_arguments, Weather) for call in called.message.tool_calls)
    answered = client.chat.completions.parse(**shaped, logit_bias={str(answer_start): 100}).choices[0]
    assert not answered.message.tool_calls and answered.finish_reason in ("stop", "length"), answered.message
    if answered.finish_reason == "stop":
        assert isinstance(answered.message.parsed, Person)
    forced = client.chat.completions.parse(**shaped, tool_choice=FORCED, logit_bias={str(answer_start): 100})
    # the named function's call was asked for: OpenAI's answer then stops, not `tool_calls`
    assert forced.choices[0].finish_reason == "stop" and forced.choices[0].message.tool_calls


def test_a_forced_call_cut_by_max_tokens_is_a_cut_call_not_call_syntax(client):
    """OpenAI returns a call max_tokens cut as tool_calls with the arguments so far (finish_reason "length"); the
    model's own call syntax (<tool_call>...) is never the answer's text, whole or streamed."""
    ask = dict(model=MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}], temperature=0)
    ask |= dict(tools=[WEATHER_TOOL], tool_choice="required")
    whole_call = client.chat.completions.create(**ask, max_tokens=80).choices[0].message.tool_calls[0]
    cut_calls = 0
    for max_tokens in range(4, 40, 3):
        choice = client.chat.completions.create(**ask, max_tokens=max_tokens).choices[0]
        if choice.finish_reason != "length":
            continue
        assert choice.message.content is None, choice.message.content
        for call in choice.message.tool_calls or ():
            cut_calls += 1
            assert call.function.name == "get_weather"
            assert whole_call.function.arguments.replace(" ", "").startswith(call.function.arguments.replace(" ", ""))
        streamed, deltas = "", []
        for chunk in client.chat.completions.create(**ask, max_tokens=max_tokens, stream=True):
            for c in chunk.choices:
                streamed += c.delta.content or ""
                deltas += c.delta.tool_calls or []
        assert streamed == "" and len(deltas) == len(choice.message.tool_calls or ()), streamed
    assert cut_calls, "no answer was cut inside its arguments"


def test_openais_ranges_for_seed_and_top_p(client):
    """seed is OpenAI's int64 (UIs send -1): the same negative seed, the same tokens; top_p 0 keeps the most likely
    token alone, which is greedy."""
    ask = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me about the gateway."}], max_tokens=12)
    first, again = (client.chat.completions.create(**ask, seed=-1, temperature=1.0) for _ in range(2))
    assert first.choices[0].message.content == again.choices[0].message.content
    greedy = client.chat.completions.create(**ask, temperature=0).choices[0].message.content
    assert client.chat.completions.create(**ask, top_p=0, temperature=1.0, seed=3).choices[0].message.content == greedy


def message_calls(message) -> list[str]:
    calls = message["tool_calls"] if isinstance(message, dict) else message.tool_calls
    return [c["id"] if isinstance(c, dict) else c.id for c in calls]


def test_tool_fields_that_are_wrong_are_named(client):
    cases = [
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"messages": [{"role": "user", "content": "hi", "audio": {"id": "x"}}]}, "messages[0].audio"),
        # found by an adversarial review (each was a 500)
        ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": "get_weather"}}, "tool_choice"),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"function": "oops"}]}]},
            "messages[0].tool_calls[0].function",
        ),
        ({"tools": [WEATHER_TOOL, WEATHER_TOOL]}, "tools"),
        # (a review) each was answered, as OpenAI refuses it: a client's mistake went unseen until run there
        ({"tools": []}, "tools"),
        ({"max_completion_tokens": 3}, "max_completion_tokens"),  # beside the body's max_tokens: one was dropped
        ({"stop": ""}, "stop"),
        ({"stop": ["", "x"]}, "stop"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"response_format": {"type": "json_object", "schema": {}}}, "response_format"),
        # a valid schema too large to compile quickly, and one that allows only an empty answer
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {
                            "type": "object",
                            "properties": {f"p{i}": {"type": "integer"} for i in range(10000)},
                        },
                    },
                }
            },
            "response_format",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}},
                    },
                }
            },
            "response_format",
        ),
    ]
    for extra, param in cases:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2} | extra
        reply = httpx.post(f"{client.base_url}chat/completions", json=body, timeout=30)
        assert reply.status_code == 400 and reply.json()["error"]["param"].startswith(param), reply.text[:300]
    deep = "[" * 100000 + "]" * 100000  # arguments nested past any parser's recursion
    history = [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "get_weather", "arguments": deep}}]},
               {"role": "user", "content": "go on"}]  # fmt: skip
    reply = httpx.post(
        f"{client.base_url}chat/completions", json={"model": MODEL, "messages": history, "max_tokens": 2}
    )
    assert reply.status_code in (200, 400), reply.text[:300]


class Weather(BaseModel):
    city: str = Field(max_length=12)
    unit: Literal["c", "f"]


def test_langchain_chat_openai_invokes_streams_binds_tools_and_structures(stack):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=MODEL, base_url=f"{stack.url}/v1", api_key="unused", max_tokens=12, temperature=0)
    whole = llm.invoke("Tell me about the gateway.")
    streamed = "".join(chunk.content for chunk in llm.stream("Tell me about the gateway."))
    assert whole.content and streamed == whole.content
    llm = ChatOpenAI(model=MODEL, base_url=f"{stack.url}/v1", api_key="unused", max_tokens=80, temperature=0)
    called = llm.bind_tools([WEATHER_TOOL], tool_choice="get_weather").invoke("Weather in Paris?")
    (call,) = called.tool_calls
    assert call["name"] == "get_weather" and set(call["args"]) == {"city", "unit"}
    structured = llm.with_structured_output(Weather, method="json_schema").invoke("Weather in Paris?")
    assert isinstance(structured, Weather)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_n_choices_whole_and_streamed(client, kind):
    answer = kind_chat(client, kind, max_tokens=6, temperature=1.0, seed=3, n=3, logprobs=True)
    assert [c.index for c in answer.choices] == [0, 1, 2]
    assert all(len(c.logprobs.content) == 6 and c.finish_reason == "length" for c in answer.choices)
    assert answer.usage.completion_tokens == 18
    assert len({c.message.content for c in answer.choices}) > 1  # seeds 3, 4, 5: different draws
    again = kind_chat(client, kind, max_tokens=6, temperature=1.0, seed=3, n=3)
    assert [c.message.content for c in again.choices] == [c.message.content for c in answer.choices]
    stream = kind_stream(
        client, kind, max_tokens=6, temperature=1.0, seed=3, n=3, stream_options={"include_usage": True}
    )
    texts, reasons, usage = {0: "", 1: "", 2: ""}, {}, None
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                reasons[c.index] = c.finish_reason
        usage = chunk.usage or usage
    assert texts == {c.index: c.message.content for c in answer.choices}
    assert reasons == {0: "length", 1: "length", 2: "length"} and usage.completion_tokens == 18


async def test_the_async_client_streams_calls_tools_and_parses(stack):
    client = openai.AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    whole, parsed, called = await asyncio.gather(
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0),
        client.beta.chat.completions.parse(model=MODEL, messages=messages, response_format=Weather, max_tokens=60),
        client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=80, tools=[WEATHER_TOOL], tool_choice="required"
        ),
    )
    stream = await client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=6, temperature=0, stream=True
    )
    streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert streamed == whole.choices[0].message.content
    assert isinstance(parsed.choices[0].message.parsed, Weather)
    assert called.choices[0].message.tool_calls[0].function.name == "get_weather"
    await client.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_echo_with_logprobs_scores_the_prompt_as_lm_eval_reads_it(client, kind, demo_checkpoint):
    tokenizer = Tokenizer.from_file(str(demo_checkpoint / "tokenizer.json"))
    spec = dict(KINDS[kind])
    ids = tokenizer.encode(spec["content"], add_special_tokens=False).ids
    answer = client.completions.create(
        model=MODEL, prompt=ids, max_tokens=1, temperature=0, logprobs=1, echo=True, extra_body=spec.get("extra_body")
    )
    choice = answer.choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == len(ids) + 1 and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
    assert choice.text == tokenizer.decode(ids) + lp.tokens[-1]
    assert "".join(lp.tokens) == choice.text and lp.text_offset[-1] == len(choice.text) - len(lp.tokens[-1])
    # lm-eval's greedy check reads the top alternative: the most likely, never less likely than the prompt's own token
    # (there too, as OpenAI's: up to logprobs + 1 keys)
    tops = lp.top_logprobs[1:-1]
    assert all(
        len(top) <= 2 and top[token] == lp_ and max(top.values()) >= lp_ - 1e-5
        for top, token, lp_ in zip(tops, lp.tokens[1:-1], lp.token_logprobs[1:-1], strict=True)
    )
    echoed = client.completions.create(
        model=MODEL, prompt="The quick brown fox", max_tokens=3, echo=True, temperature=0
    )
    assert echoed.choices[0].text.startswith("The quick brown fox") and echoed.choices[0].logprobs is None


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_max_tokens_0_with_echo_is_the_prompt_alone_scored_as_with_one_token(client, kind, demo_checkpoint):
    """The log-likelihood form older lm-eval (oa_completion) and HELM send: echo, logprobs, max_tokens 0. It was a
    400; now it is the prompt alone, with the same scores a one-token answer gives it, whole and streamed."""
    tokenizer = Tokenizer.from_file(str(demo_checkpoint / "tokenizer.json"))
    spec = dict(KINDS[kind])
    ids = tokenizer.encode(spec["content"], add_special_tokens=False).ids
    ask = dict(model=MODEL, prompt=ids, temperature=0, logprobs=2, echo=True, extra_body=spec.get("extra_body"))
    one = client.completions.create(max_tokens=1, **ask).choices[0].logprobs
    raw = client.completions.with_raw_response.create(max_tokens=0, **ask)
    assert raw.headers["x-tandem-route"].split(";")[0] == kind  # each engine answers it
    alone = raw.parse()
    choice = alone.choices[0]
    assert choice.text == tokenizer.decode(ids) and choice.finish_reason == "length"
    assert alone.usage.completion_tokens == 0 and alone.usage.prompt_tokens == len(ids)
    assert choice.logprobs.tokens == one.tokens[:-1] and choice.logprobs.text_offset == one.text_offset[:-1]
    assert choice.logprobs.token_logprobs[0] is None
    assert choice.logprobs.token_logprobs[1:] == pytest.approx(one.token_logprobs[1:-1], abs=1e-5)
    streamed = list(client.completions.create(max_tokens=0, stream=True, **ask))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == choice.text
    assert [t for c in streamed if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens] == (
        choice.logprobs.tokens
    )
    plain = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=0, echo=True,
                                      extra_body=spec.get("extra_body"))  # fmt: skip
    assert plain.choices[0].text == "The quick brown fox" and plain.choices[0].logprobs is None
    for refused_form in (
        lambda: client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=0),
        lambda: kind_chat(client, kind, max_tokens=0),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            refused_form()
        assert refused.value.param == "max_tokens"  # the field, not the body (a review)


def test_a_batch_of_one_prompt_is_that_prompt(client):
    flat = client.completions.create(model=MODEL, prompt=[1, 309, 201], max_tokens=3, temperature=0)
    batched = client.completions.create(model=MODEL, prompt=[[1, 309, 201]], max_tokens=3, temperature=0)
    texts = client.completions.create(model=MODEL, prompt=["The quick brown fox"], max_tokens=3, temperature=0)
    assert batched.choices[0].text == flat.choices[0].text and texts.choices[0].text


def test_a_batch_of_prompts_gets_each_prompt_its_own_choices_as_openai_indexes_them(client):
    """OpenAI's batch: prompt p's choice j is choice p * n + j; each gets what it would get alone (the same seed
    included); usage counts each prompt once and every choice's tokens. Whole and streamed alike."""
    prompts = ["The quick brown fox", "Once upon a time", "Tell me about the gateway"]
    sampling = dict(model=MODEL, max_tokens=5, temperature=1.0, seed=11, n=2)
    alone = [client.completions.create(prompt=p, **sampling) for p in prompts]
    batch = client.completions.create(prompt=prompts, **sampling)
    assert [c.index for c in batch.choices] == list(range(6))
    assert [c.text for c in batch.choices] == [c.text for a in alone for c in a.choices]
    assert batch.usage.prompt_tokens == sum(a.usage.prompt_tokens for a in alone)
    assert batch.usage.completion_tokens == sum(a.usage.completion_tokens for a in alone)
    assert batch.usage.total_tokens == batch.usage.prompt_tokens + batch.usage.completion_tokens
    texts, usage = {}, None
    for chunk in client.completions.create(
        prompt=prompts, stream=True, stream_options={"include_usage": True}, **sampling
    ):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
        usage = chunk.usage or usage
    assert [texts[i] for i in range(6)] == [c.text for c in batch.choices]
    assert (usage.prompt_tokens, usage.completion_tokens) == (batch.usage.prompt_tokens, batch.usage.completion_tokens)
    ids = client.completions.create(model=MODEL, prompt=[[1, 309, 201], [1, 42]], max_tokens=3, temperature=0)
    assert [c.text for c in ids.choices] == [
        client.completions.create(model=MODEL, prompt=p, max_tokens=3, temperature=0).choices[0].text
        for p in ([1, 309, 201], [1, 42])
    ]


@pytest.mark.parametrize(
    "prompts",
    [
        ["What is the weather like?", "Mail me at ann.lee@example.com"],
        ["Room 12", "415-555-0100 is my cell"],  # a review: joined, the two numbers read as one
        ["Total: 42", "(415) 555-0100 is my cell, text me"],
    ],
)
def test_a_batch_with_personal_data_in_one_prompt_is_private_as_a_whole(client, prompts):
    """The scan reads the whole batch: the prompt without personal data goes where the private one goes (the first
    choice's route is the header's)."""
    raw = client.completions.with_raw_response.create(model=MODEL, prompt=prompts, max_tokens=2)
    assert raw.headers["x-tandem-route"] == "edge; rule=private"
    assert len(raw.parse().choices) == 2


@pytest.mark.parametrize(
    "prompt, message",
    [
        (["a"] * 33, "at most 32"),
        (["a", ""], "prompt[1] is empty"),
        (["a", [1, 2]], "all texts or all token-id lists"),
        ([[1, 2], [1, 10**9]], "prompt[1] token ids out of range"),
        (["a", LONG_TEXT * 8], "in the prompt[1],"),
    ],
    ids=["too-many", "empty-member", "mixed", "bad-ids", "too-long"],
)
def test_a_bad_batch_is_a_400_naming_the_prompt(client, prompt, message):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=3)
    error = err.value.response.json()["error"]
    assert error["param"].startswith("prompt") and message in error["message"], error


def test_a_batch_asks_for_no_more_choices_than_the_gateway_allows(client):
    """8 prompts × n 8 would be 64 sequences from one request (one admission slot): refused, naming n."""
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt=["a"] * 8, n=8, max_tokens=3)
    error = err.value.response.json()["error"]
    assert error["param"] == "n" and "64 choices: at most 32" in error["message"]


def test_null_is_not_given_as_openai_takes_it(client):
    """The openai client sends `temperature=None` as `"temperature": null`; OpenAI reads null as not given. So does
    Tandem: the defaults apply (one choice, the model's sampling defaults), where each was a 400 before."""
    nulls = dict(temperature=None, top_p=None, n=None, presence_penalty=None, frequency_penalty=None, stream=None,
                 max_tokens=4, messages=[{"role": "user", "content": "hi"}], model=MODEL)  # fmt: skip
    answer = client.chat.completions.create(**nulls)
    plain = client.chat.completions.create(model=MODEL, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert len(answer.choices) == 1 and answer.choices[0].message.content
    assert answer.usage.prompt_tokens == plain.usage.prompt_tokens

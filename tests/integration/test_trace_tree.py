"""One request's whole trace, exported over real OTLP/gRPC by every process to a collector in the test.

The stack has Redis (prefix hints) and a registered edge agent, so the tree holds every hop a
request can take: gateway stages, the Redis lookup, the gRPC call, the worker's phases.
"""

import os
import time

import openai
import pytest

from tests.conftest import free_port
from tests.otlp_collector import CollectedSpan, OtlpCollector
from tests.stack import endpoint_of, otlp_env, start_gateway, start_stack

pytestmark = pytest.mark.integration
MODEL = "tandem-demo"
SECRET = "Zanzibar-7731"  # a word only the prompts hold: it must not reach a span unless content tracing is on
LONG_TEXT = f"{SECRET} tell me more about the gateway and its routing. " * 50  # > 512 tokens: the cloud rule


@pytest.fixture(scope="module")
def stack(demo_checkpoint, tmp_path_factory, collector, redis_url):
    port = free_port()
    env = {
        "REDIS_URL": redis_url,
        "TANDEM_TRACE_STAGES": "true",  # the full tree: a span for each gateway stage (the default puts them on one)
        "TANDEM_EDGE_TOKEN": "edge-secret",
        "TANDEM_EDGE_REGISTER_URL": f"http://127.0.0.1:{port}",
    }
    s = start_stack(demo_checkpoint, tmp_path_factory.mktemp("stack"), collector.endpoint, env, port)
    yield s
    s.stop()


def traced_chat(url: str, collector: OtlpCollector, content: str, until: set[str]) -> list[CollectedSpan]:
    """Send one chat request under a fresh trace id; wait until spans named `until` arrived ("name" or "service:name")."""
    trace_id = os.urandom(16).hex()
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": content}],
        max_tokens=4,
        temperature=0,
        extra_headers={"traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-01"},
    )
    deadline = time.monotonic() + 10
    while True:
        spans = collector.trace(trace_id)
        missing = until - {s.name for s in spans} - {f"{s.service}:{s.name}" for s in spans}
        if not missing:
            return spans
        assert time.monotonic() < deadline, f"missing spans {missing}"
        time.sleep(0.1)


def one(spans: list[CollectedSpan], name: str) -> CollectedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


GATEWAY_STAGES = ["gateway.tokenize", "gateway.classify", "gateway.hint_lookup", "gateway.route_plan"]
WORKER_PHASES = ["worker.queue", "worker.prefill", "worker.decode"]
# Spans that end last: the RPC's server span, and the gateway's request span.
CLOUD_DONE = {"tandem-cloud-worker:/tandem.worker.v1.Worker/Generate", "tandem-gateway:POST /v1/chat/completions"}
EDGE_DONE = {"tandem-edge-agent:/tandem.worker.v1.Worker/Generate", "tandem-gateway:POST /v1/chat/completions"}


def test_the_tree_of_one_cloud_request(stack, collector):
    traced_chat(
        stack.url, collector, LONG_TEXT, {"gateway.stream", *WORKER_PHASES, *CLOUD_DONE}
    )  # warms the prefix cache
    spans = traced_chat(stack.url, collector, LONG_TEXT, {"gateway.stream", *WORKER_PHASES, *CLOUD_DONE})
    by_id = {s.span_id: s for s in spans}

    def parent(span: CollectedSpan) -> CollectedSpan:
        return by_id[span.parent_span_id]

    server = next(s for s in spans if s.service == "tandem-gateway" and s.name == "POST /v1/chat/completions")
    for name in [*GATEWAY_STAGES, "gateway.backend_call", "gateway.stream"]:
        assert parent(one(spans, name)) is server, name
    # The hint lookup (the I/O before the plan) has its one Redis round trip under it.
    lookup = one(spans, "gateway.hint_lookup")
    assert lookup.attributes["tandem.prefix_hint_mode"] == "redis"
    redis_calls = [s for s in spans if parent_name(s, by_id) == "gateway.hint_lookup"]
    assert redis_calls and all(s.attributes.get("db.system") == "redis" for s in redis_calls)
    # gateway.backend_call → gRPC client → the worker's server span → its phases.
    call = one(spans, "gateway.backend_call")
    assert call.attributes["tandem.outcome"] == "first_token"
    worker = next(
        s for s in spans if s.service == "tandem-cloud-worker" and s.name == "/tandem.worker.v1.Worker/Generate"
    )
    assert parent(parent(worker)) is call
    for name in WORKER_PHASES:
        assert parent(one(spans, name)) is worker
    prefill = one(spans, "worker.prefill")
    assert prefill.attributes["tandem.cached_prompt_tokens"] > 0  # the second request hit the prefix cache
    # Attributes carry the decision, and predicted against actual cached tokens.
    plan = one(spans, "gateway.route_plan")
    assert plan.attributes["tandem.rule"] == "default"
    assert plan.attributes["tandem.pool"] == "cloud"
    assert plan.attributes["tandem.backend"] == endpoint_of(stack, "cloud")
    assert plan.attributes["tandem.predicted_prefix_blocks"] > 0
    assert {"tandem.plugin_us.filter:healthy", "tandem.plugin_us.prefix-hit"} <= set(plan.attributes)
    stream = one(spans, "gateway.stream")
    assert stream.attributes["tandem.backend"] == endpoint_of(stack, "cloud")
    assert stream.attributes["tandem.predicted_cached_tokens"] > 0
    assert stream.attributes["tandem.cached_prompt_tokens"] == prefill.attributes["tandem.cached_prompt_tokens"]
    assert stream.attributes["tandem.completion_tokens"] == 4
    assert server.attributes["tandem.tenant"] == "default"
    assert server.attributes["tandem.auth"] == "none"
    assert server.attributes["http.route"] == "/v1/chat/completions"
    assert server.attributes["http.response.status_code"] == 200
    # OpenTelemetry's GenAI conventions, alongside: the request on the server span, the answer on the stream's.
    genai_request = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.max_tokens": 4,
        "gen_ai.request.temperature": 0.0,  # what it ran with: the request's
    }
    assert genai_request.items() <= server.attributes.items()
    assert genai_request.items() <= stream.attributes.items()
    assert stream.attributes["gen_ai.response.model"] == MODEL
    assert stream.attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert stream.attributes["gen_ai.usage.output_tokens"] == 4
    assert stream.attributes["gen_ai.usage.input_tokens"] > 512  # the long prompt, after the chat template
    assert (
        stream.attributes["gen_ai.usage.cache_read.input_tokens"] == prefill.attributes["tandem.cached_prompt_tokens"]
    )
    # No prompt or completion text anywhere, by default.
    assert not any(SECRET in str(s.attributes) for s in spans)


def test_by_default_the_stages_are_on_the_request_s_span(stack, collector, demo_checkpoint, redis_url):
    """Without TANDEM_TRACE_STAGES, no span for each stage: the request's span holds what they held and their times,
    and the Redis lookup is its child."""
    policy = stack.children[0].log_path.parents[1] / "policy.yaml"
    gateway = start_gateway(
        demo_checkpoint, policy, free_port(), otlp_env(collector.endpoint) | {"REDIS_URL": redis_url}
    )
    try:
        traced_chat(gateway.url, collector, LONG_TEXT, {"gateway.stream", *CLOUD_DONE})  # warms the prefix cache
        spans = traced_chat(gateway.url, collector, LONG_TEXT, {"gateway.stream", *WORKER_PHASES, *CLOUD_DONE})
    finally:
        gateway.stop()
    names = {s.name for s in spans}
    assert not names & set(GATEWAY_STAGES), names
    server = next(s for s in spans if s.service == "tandem-gateway" and s.name == "POST /v1/chat/completions")
    stage_us = {f"tandem.stage_us.{stage.removeprefix('gateway.')}" for stage in GATEWAY_STAGES}
    assert stage_us <= set(server.attributes)
    assert all(server.attributes[key] >= 0 for key in stage_us)
    assert server.attributes["tandem.prompt_tokens"] > 512
    assert server.attributes["tandem.privacy_tags"] == []
    assert server.attributes["tandem.prefix_hint_mode"] == "redis"
    assert server.attributes["tandem.predicted_prefix_blocks"] > 0
    assert {"tandem.plugin_us.filter:healthy", "tandem.plugin_us.prefix-hit"} <= set(server.attributes)
    assert server.attributes["tandem.backend"] == endpoint_of(stack, "cloud")
    by_id = {s.span_id: s for s in spans}
    redis_calls = [s for s in spans if s.attributes.get("db.system") == "redis"]
    assert redis_calls and all(by_id[s.parent_span_id] is server for s in redis_calls)
    call = one(spans, "gateway.backend_call")
    assert by_id[call.parent_span_id] is server
    assert not any(SECRET in str(s.attributes) for s in spans)


def parent_name(span: CollectedSpan, by_id: dict[str, CollectedSpan]) -> str | None:
    p = by_id.get(span.parent_span_id)
    return p.name if p else None


def test_edge_registration_continues_the_agents_trace(stack, collector):
    deadline = time.monotonic() + 15
    while True:
        register = [s for s in collector.spans if s.name == "edge.register"]
        children = [
            s
            for r in register
            for s in collector.trace(r.trace_id)
            if s.service == "tandem-gateway" and s.parent_span_id == r.span_id
        ]
        if children:
            break
        assert time.monotonic() < deadline, "no gateway span under the agent's edge.register span"
        time.sleep(0.2)
    assert register[0].service == "tandem-edge-agent"
    assert register[0].attributes["tandem.execution_provider"] == "CPUExecutionProvider"
    assert children[0].attributes["tandem.execution_provider"] == "CPUExecutionProvider"


def test_content_tracing_is_opt_in_and_never_for_private_requests(stack, collector, demo_checkpoint):
    policy = stack.children[0].log_path.parents[1] / "policy.yaml"  # the stack's, beside its logs/
    gateway = start_gateway(
        demo_checkpoint, policy, free_port(), otlp_env(collector.endpoint) | {"TANDEM_TRACE_CONTENT": "1"}
    )
    try:
        spans = traced_chat(gateway.url, collector, LONG_TEXT, {"gateway.stream", *CLOUD_DONE})
        assert SECRET in one(spans, "gateway.stream").attributes["tandem.prompt_text"]
        assert "tandem.completion_text" in one(spans, "gateway.stream").attributes
        private = f"{SECRET} mail ann.lee@example.com"  # the detector makes it private: edge only
        spans = traced_chat(gateway.url, collector, private, {"gateway.stream", *EDGE_DONE})
        server = one(spans, "POST /v1/chat/completions")  # stages on the request's span: the default
        assert server.attributes["tandem.private"] is True
        assert not any(SECRET in str(s.attributes) for s in spans)
    finally:
        gateway.stop()


def test_a_streamed_answer_has_its_stream_span_too(stack, collector):
    trace_id = os.urandom(16).hex()
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": LONG_TEXT}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-01"},
    )
    assert sum(1 for _ in stream) >= 2
    deadline = time.monotonic() + 10
    while not (spans := [s for s in collector.trace(trace_id) if s.name == "gateway.stream"]):
        assert time.monotonic() < deadline, "no gateway.stream span for a streamed answer"
        time.sleep(0.1)
    assert spans[0].attributes["tandem.completion_tokens"] == 5
    assert spans[0].attributes["tandem.finish_reason"] == "length"
    assert spans[0].attributes["gen_ai.usage.output_tokens"] == 5
    assert spans[0].attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert spans[0].attributes["gen_ai.request.temperature"] == 1.0  # unset: the model's default (OpenAI's here)

"""An OpenAI-compatible HTTP server as a pool member.

The server here is a second Tandem gateway (B), a real OpenAI-compatible
server that accepts token-id prompts as vLLM and SGLang do. Gateway A's
cloud pool is B over HTTP, its edge pool B's edge agent over gRPC.
"""

import os
import time

import httpx
import openai
import pytest

from tandem.stack import start_local_stack
from tests.conftest import free_port
from tests.otlp_collector import OtlpCollector
from tests.stack import otlp_env, start_gateway, write_policy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def front(demo_checkpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("http-backend")
    collector = OtlpCollector()
    otlp = otlp_env(collector.endpoint)
    edge_port = free_port()
    back = start_local_stack(
        demo_checkpoint, write_policy(work / "back.yaml", free_port(), edge_port), work, free_port(), otlp
    )
    policy = work / "front.yaml"
    policy.write_text(
        "version: 1\n"
        "pools:\n"
        f"  edge: {{kind: edge, endpoints: ['grpc://127.0.0.1:{edge_port}']}}\n"
        f"  cloud: {{kind: cloud, endpoints: ['{back.url}']}}\n"
        "rules:\n"
        "  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge}\n"
        "  - {name: default, route: cloud}\n"
    )
    port = free_port()
    front_gateway = start_gateway(
        demo_checkpoint, policy, port, otlp | {"OTEL_SERVICE_NAME": "tandem-front"}, work / "front"
    )
    yield f"http://127.0.0.1:{port}", back, collector
    front_gateway.stop()
    back.stop()
    collector.stop()


def ask(url, **kwargs):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    body = dict(
        model="tandem-demo", messages=[{"role": "user", "content": "Name a colour."}], max_tokens=12, temperature=0
    )
    return client.chat.completions.with_raw_response.create(**(body | kwargs))


def test_a_public_request_goes_over_http_and_answers_like_the_server_itself(front):
    url, back, _ = front
    via_http = ask(url)
    assert via_http.headers["x-tandem-route"] == "cloud; rule=default"
    assert via_http.headers["x-tandem-backend"] == back.url
    direct = ask(back.url).parse()
    answer = via_http.parse()
    assert answer.choices[0].message.content == direct.choices[0].message.content
    assert answer.usage.prompt_tokens == direct.usage.prompt_tokens
    assert answer.usage.completion_tokens == direct.usage.completion_tokens


def test_streaming_over_http(front):
    url, _, _ = front
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    body = dict(
        model="tandem-demo", messages=[{"role": "user", "content": "Name a colour."}], max_tokens=12, temperature=0
    )
    streamed = "".join(
        c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **body) if c.choices
    )
    assert streamed == client.chat.completions.create(**body).choices[0].message.content


def test_the_prompt_alone_over_http_asks_the_upstream_nothing(front):
    """Completions' echo with max_tokens 0 and no logprobs is the prompt alone, which the gateway writes itself: it
    was refused as if logprobs were asked (a review); with logprobs it still is (the pool cannot score)."""
    url, _, _ = front
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    raw = client.completions.with_raw_response.create(
        model="tandem-demo", prompt="The quick brown fox", max_tokens=0, echo=True
    )
    answer = raw.parse()
    assert raw.headers["x-tandem-route"] == "cloud; rule=default"
    assert answer.choices[0].text == "The quick brown fox" and answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 0 and answer.usage.prompt_tokens > 0
    with pytest.raises(openai.BadRequestError, match="logprobs"):
        client.completions.create(
            model="tandem-demo", prompt="The quick brown fox", max_tokens=0, echo=True, logprobs=1
        )


def test_private_requests_never_take_the_http_cloud_member(front):
    url, _, _ = front
    assert ask(url, extra_body={"metadata": {"privacy": "pii"}}).headers["x-tandem-route"] == "edge; rule=private"


def test_one_trace_spans_both_gateways_and_the_worker(front):
    url, _, collector = front
    trace_id = os.urandom(16).hex()
    ask(url, extra_headers={"traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-01"})
    deadline = time.monotonic() + 10
    while {"tandem-front", "tandem-gateway", "tandem-cloud-worker"} - {s.service for s in collector.trace(trace_id)}:
        assert time.monotonic() < deadline, {s.service for s in collector.trace(trace_id)}
        time.sleep(0.1)


def test_a_private_request_over_http_to_another_gateway_stays_on_its_edge(front, demo_checkpoint, tmp_path):
    """An edge pool may hold a Tandem gateway on this host over HTTP (docs/policy.md). A private request reaches it
    tagged (X-Tandem-Privacy), so that gateway keeps it on its own edge: untagged, it went to its cloud pool."""
    _, back, _ = front
    cloud = next(c.endpoint for c in back.children if c.pool == "cloud")
    policy = tmp_path / "near.yaml"
    policy.write_text(
        "version: 1\n"
        "pools:\n"
        f"  near: {{kind: edge, endpoints: ['{back.url}']}}\n"
        f"  cloud: {{kind: cloud, endpoints: ['{cloud}']}}\n"
        "rules:\n"
        "  - {name: private, match: {privacy: [private, pii, confidential]}, route: near}\n"
        "  - {name: default, route: cloud}\n"
    )
    port = free_port()
    near = start_gateway(demo_checkpoint, policy, port, {}, tmp_path / "near")
    try:

        def routed(pool: str) -> float:
            metrics = httpx.get(f"{back.url}/metrics", timeout=10).text
            lines = [line for line in metrics.splitlines() if line.startswith("tandem_gateway_requests_total{")]
            return sum(float(line.rpartition(" ")[2]) for line in lines if f'pool="{pool}"' in line)

        before = routed("edge"), routed("cloud")
        answer = ask(f"http://127.0.0.1:{port}", extra_headers={"X-Tandem-Privacy": "private"})
        assert answer.headers["x-tandem-route"] == "near; rule=private"
        assert (routed("edge"), routed("cloud")) == (before[0] + 1, before[1])
    finally:
        near.stop()


def test_a_gateway_that_is_its_own_backend_refuses_the_loop_at_once(front, demo_checkpoint, tmp_path):
    """A review pointed a cloud pool at the gateway's own port: one request called the gateway a hundred times,
    nested, and failed after the 10 s first-token timeout. Each hop names its gateway (Via), so the gateway that
    finds itself there answers 508, and the client hears why at once."""
    _, back, _ = front
    edge = next(c.endpoint for c in back.children if c.pool == "edge")
    port = free_port()
    policy = tmp_path / "loop.yaml"
    policy.write_text(
        "version: 1\n"
        "pools:\n"
        f"  edge: {{kind: edge, endpoints: ['{edge}']}}\n"
        f"  cloud: {{kind: cloud, endpoints: ['http://127.0.0.1:{port}']}}\n"
        "rules:\n"
        "  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge}\n"
        "  - {name: default, route: cloud}\n"
    )
    looped = start_gateway(demo_checkpoint, policy, port, {}, tmp_path / "loop")
    try:
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as failed:
            ask(f"http://127.0.0.1:{port}")
        assert time.monotonic() - started < 3
        assert "HTTP 508 (routing_loop)" in failed.value.message, failed.value.message
        direct = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            headers={"Via": "1.1 tandem-a, 1.1 proxy (nginx), 1.1 tandem-b, 1.1 tandem-c, 1.1 tandem-d"},
        )
        assert direct.status_code == 508 and direct.json()["error"]["code"] == "routing_loop", direct.text
        proxied = httpx.post(  # a proxy's Via entry and three gateways: served
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json={"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                  "metadata": {"privacy": "private"}},
            headers={"Via": "1.1 proxy (nginx), 1.1 tandem-a, 1.1 tandem-b, 1.1 tandem-c"},
        )  # fmt: skip
        assert proxied.status_code == 200, proxied.text
    finally:
        looped.stop()


def test_a_pool_whose_cache_every_tenant_shares_shows_callers_no_cached_count(front):
    """(two reviews) Without `send_cache_salt`, the server's prefix cache is every tenant's: its cached count told one
    tenant which prompts another had sent, so callers are shown none; the operator's metric keeps it (hiding it
    there too made cache-affinity routing look broken on every dashboard)."""
    url, back, _ = front
    words = [{"role": "user", "content": "Tell me about the tiered model store and its caches. " * 6}]
    for _ in range(2):
        answer = ask(url, messages=words).parse()
    direct = ask(back.url, messages=words).parse()
    assert direct.usage.prompt_tokens_details.cached_tokens > 0  # the server behind did cache it
    assert answer.usage.prompt_tokens_details is None or not answer.usage.prompt_tokens_details.cached_tokens
    metrics = httpx.get(f"{url}/metrics").text
    actual = [line for line in metrics.splitlines() if line.startswith("tandem_gateway_prefix_tokens_total{")]
    assert any('kind="actual"' in line and float(line.split()[-1]) > 0 for line in actual), actual


def test_readyz_reports_the_http_member_and_its_loss(front):
    url, back, _ = front
    member = httpx.get(f"{url}/readyz").json()["backends"][back.url]
    assert member["healthy"] and member["execution_provider"] == "openai-http"
    gateway_b = next(c for c in back.children if c.pool is None)
    gateway_b.process.terminate()
    gateway_b.process.wait(timeout=10)
    deadline = time.monotonic() + 5
    while httpx.get(f"{url}/readyz").json()["backends"][back.url]["healthy"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with pytest.raises(openai.APIStatusError) as err:
        ask(url)
    assert err.value.status_code == 503
    assert "pool 'cloud'" in err.value.response.json()["error"]["message"]

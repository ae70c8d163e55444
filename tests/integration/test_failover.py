"""Backends going away: private requests are refused, never rerouted to the cloud."""

import httpx
import openai
import pytest

from tests.stack import start_stack

pytestmark = pytest.mark.integration


@pytest.fixture
def stack(demo_checkpoint, tmp_path):
    s = start_stack(demo_checkpoint, tmp_path)
    yield s
    s.stop()


def route_of(client, **kwargs):
    raw = client.chat.completions.with_raw_response.create(
        model="tandem-demo", messages=[{"role": "user", "content": "hello"}], max_tokens=4, **kwargs
    )
    return raw.headers["x-tandem-route"]


def test_private_gets_503_when_the_edge_is_gone_and_public_falls_back(stack):
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    private = {"extra_body": {"metadata": {"privacy": "pii"}}}
    assert route_of(client, **private) == "edge; rule=private"
    npu_before = {"extra_headers": {"X-Tandem-Device": '{"npu": true}'}}
    assert route_of(client, **npu_before) == "edge; rule=short-on-capable-device"

    stack.stop("edge")
    with pytest.raises(openai.APIStatusError) as err:
        route_of(client, **private)
    assert err.value.status_code == 503
    message = err.value.response.json()["error"]["message"]
    assert "private request: only edge pools may serve it" in message  # says why the cloud was not tried
    metrics = httpx.get(f"{stack.url}/metrics").text
    assert 'tandem_gateway_requests_total{pool="none",rule="none",status="no_backend",tenant="default"} 1.0' in metrics
    assert route_of(client) == "cloud; rule=default"  # public traffic is unaffected
    npu = {"extra_headers": {"X-Tandem-Device": '{"npu": true}'}}
    assert route_of(client, **npu) == "cloud; rule=short-on-capable-device"  # its edge route falls back to the cloud

    stack.stop("cloud")
    with pytest.raises(openai.APIStatusError) as err:
        route_of(client)
    assert err.value.status_code == 503
    assert "pool 'cloud'" in err.value.response.json()["error"]["message"]


def test_public_request_falls_back_to_the_edge_when_the_cloud_is_gone(stack):
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    stack.stop("cloud")
    assert route_of(client) == "edge; rule=default"  # the default rule's fallback: [edge]


def test_a_stream_cut_by_a_crashing_worker_ends_with_an_error_event(stack):
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)
    stream = client.chat.completions.create(
        model="tandem-demo", messages=[{"role": "user", "content": "go on"}], max_tokens=1900, stream=True
    )
    chunks = iter(stream)
    next(chunks)
    stack.kill("cloud")
    with pytest.raises(openai.APIError, match="backend failed mid-answer"):
        for _ in chunks:
            pass


def test_an_answer_cut_by_a_crashing_worker_is_a_502_that_says_where(stack):
    """(a review) The non-streamed 502 had no `X-Tandem-Route` / `X-Tandem-Backend`, which every routed answer
    carries: the operator could not tell which backend died."""
    import threading
    import time

    replies = []
    body = {"model": "tandem-demo", "messages": [{"role": "user", "content": "go on"}], "max_tokens": 1900}
    asking = threading.Thread(
        target=lambda: replies.append(httpx.post(f"{stack.url}/v1/chat/completions", json=body, timeout=60))
    )
    asking.start()
    time.sleep(1.0)  # routed, and answering: 1,900 tokens take longer than this
    stack.kill("cloud")
    asking.join()
    (reply,) = replies
    assert reply.status_code == 502 and "mid-answer" in reply.json()["error"]["message"], reply.text
    assert reply.headers["x-tandem-route"] == "cloud; rule=default" and reply.headers["x-tandem-backend"], reply.headers

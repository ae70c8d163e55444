"""The SDK against real processes: the gateway, a cloud worker, an edge agent with its local API."""

import asyncio
import gc
import http.server
import re
import socket
import threading
import time

import httpx
import pytest
import yaml
from tandem_sdk import AsyncClient, Client, PrivateRequestError

from tandem.stack import start_local_stack
from tests.conftest import free_port
from tests.stack import write_policy

pytestmark = pytest.mark.integration
MODEL = "tandem-demo"


@pytest.fixture(scope="module")
def stack(demo_checkpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("sdk")
    policy = write_policy(work / "policy.yaml", free_port(), free_port())
    with_internal = yaml.safe_load(policy.read_text())
    with_internal["privacy"]["known_tags"] = [
        "internal",
        "社内",
    ]  # an app's own tags: not private, known to the gateway
    policy.write_text(yaml.safe_dump(with_internal))
    agent_port = free_port()
    stack = start_local_stack(demo_checkpoint, policy, work, free_port(), local_agent_port=agent_port)
    yield stack.url, f"http://127.0.0.1:{agent_port}"
    stack.stop()


def gateway_requests(url: str) -> float:
    """Every request the gateway has seen, whatever became of it (its own Prometheus counter)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(float(v) for v in re.findall(r"^tandem_gateway_requests_total\{[^}]*\} (\S+)$", text, re.M))


def test_a_private_request_is_answered_on_the_device_and_the_gateway_sees_nothing(stack):
    gateway, agent = stack
    before = gateway_requests(gateway)
    with Client(gateway, local_agent_url=agent) as client:
        detected = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Mail ann@example.com the plan."}],
            max_tokens=8,
            temperature=0,  # greedy: a sampled end-of-sequence first would leave no text to check
        )
        tagged = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, privacy="private", temperature=0
        )
    for reply in (detected, tagged):
        assert reply["tandem"]["served_by"] == "local-agent" and reply["tandem"]["private"]
        assert reply["choices"][0]["message"]["content"]
        assert reply["usage"]["completion_tokens"] >= 1
    assert "email" in detected["tandem"]["private_reason"]
    assert gateway_requests(gateway) == before


class CountingListener:
    """A TCP port that records every connection made to it (what a gateway would have received)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.connections = 0
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join()  # it wakes within its 0.2 s accept timeout; then the socket is no longer in use
        self.sock.close()


def test_a_private_request_without_a_local_agent_fails_and_sends_nothing():
    gateway = CountingListener()
    closed_port = free_port()
    try:
        with Client(gateway.url, local_agent_url=f"http://127.0.0.1:{closed_port}") as client:
            with pytest.raises(PrivateRequestError, match="no local agent .* it was not sent anywhere"):
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "My card is 4111 1111 1111 1111"}]
                )
            with pytest.raises(PrivateRequestError):  # no fallback to the gateway, even when asked for one
                Client(gateway.url, local_agent_url=None, allow_local_fallback=True).chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], privacy="pii"
                )
        time.sleep(0.3)
        assert gateway.connections == 0
    finally:
        gateway.close()


@pytest.mark.parametrize(
    ("device", "route"),
    [({"npu": True}, "edge; rule=short-on-capable-device"), ({"npu": False}, "cloud; rule=default")],
)
def test_a_public_request_carries_the_device_and_routes_as_the_policy_says(stack, device, route):
    gateway, agent = stack
    with Client(gateway, local_agent_url=agent, device=device) as client:
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert reply["tandem"]["served_by"] == "gateway"
    assert reply["tandem"]["route"] == route


def test_retries_wait_as_long_as_retry_after_says():
    answers = iter([(429, "2"), (503, "1"), (200, None)])
    seen: list[float] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(time.monotonic())
            status, retry_after = next(answers)
            body = (
                b'{"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limited"}}'
                if status != 200
                else b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}'
            )
            self.send_response(status)
            if retry_after:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = Client(f"http://127.0.0.1:{server.server_address[1]}", local_agent_url=None, max_retries=2)
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    finally:
        server.shutdown()
    assert reply["choices"][0]["message"]["content"] == "ok"
    assert len(seen) == 3
    assert seen[1] - seen[0] >= 2.0 and seen[2] - seen[1] >= 1.0


def test_the_async_client_streams_what_the_whole_answer_says(stack):
    gateway, agent = stack
    ask = [{"role": "user", "content": "Tandem answers a question where it is"}]

    async def run():
        async with AsyncClient(gateway, local_agent_url=agent) as client:
            whole = await client.chat.completions.create(model=MODEL, messages=ask, max_tokens=12, temperature=0)
            stream = await client.chat.completions.create(
                model=MODEL, messages=ask, max_tokens=12, temperature=0, stream=True
            )
            chunks = [c async for c in stream]
            private = await client.chat.completions.create(
                model=MODEL, messages=ask, max_tokens=12, temperature=0, stream=True, privacy="private"
            )
            private_chunks = [c async for c in private]
            return whole, stream.served_by, chunks, private.served_by, private_chunks

    whole, served_by, chunks, private_served_by, private_chunks = asyncio.run(run())
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert served_by == "gateway" and len(chunks) > 3
    assert text == whole["choices"][0]["message"]["content"]
    assert private_served_by == "local-agent"
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in private_chunks if c["choices"])


def _agent_token(local_token_file) -> str:
    return local_token_file.read_text().strip()


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Host": "attacker.example:50062"}, 403, "forbidden_host"),  # DNS rebinding: the page's own host name
        ({"Host": "127.0.0.1.nip.io"}, 403, "forbidden_host"),
        ({"Origin": "https://attacker.example"}, 403, "forbidden_origin"),  # a cross-site fetch from a web page
        ({"Origin": "null"}, 403, "forbidden_origin"),
        ({"Content-Type": "text/plain"}, 415, "unsupported_media_type"),  # a "simple" request needing no preflight
        ({"Authorization": ""}, 401, "invalid_token"),
        ({"Authorization": "Bearer guessed"}, 401, "invalid_token"),
    ],
)
def test_the_local_agent_refuses_what_a_web_page_could_send(stack, local_token_file, headers, status, code):
    _, agent = stack
    base = {"Content-Type": "application/json", "Authorization": f"Bearer {_agent_token(local_token_file)}"}
    body = '{"model": "tandem-demo", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}'
    reply = httpx.post(f"{agent}/v1/chat/completions", content=body, headers=base | headers)
    assert reply.status_code == status and reply.json()["error"]["code"] == code
    assert httpx.post(f"{agent}/v1/chat/completions", content=body, headers=base).status_code == 200
    for host in ("localhost", "[::1]:1234", "127.0.0.1"):
        assert httpx.get(f"{agent}/v1/local/health", headers=base | {"Host": host}).status_code == 200


def test_the_token_file_is_readable_by_its_user_only(stack, local_token_file):
    assert local_token_file.stat().st_mode & 0o777 == 0o600
    assert len(_agent_token(local_token_file)) >= 32


def test_private_calls_go_past_any_proxy_the_environment_names(stack, monkeypatch):
    gateway, agent = stack
    proxy = CountingListener()
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("http_proxy", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        with pytest.raises(httpx.HTTPError):  # the control: an ordinary client does go through it
            httpx.get(f"{gateway}/healthz", timeout=1)
        assert proxy.connections >= 1
        seen = proxy.connections
        with Client(gateway, local_agent_url=agent) as client:
            private = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Mail ann@example.com"}], max_tokens=4
            )
            tagged = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, privacy="internal"
            )
            in_japanese = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, privacy="社内"
            )  # a tag in any script goes in the header as UTF-8
        assert private["tandem"]["served_by"] == "local-agent" and tagged["tandem"]["served_by"] == "gateway"
        assert in_japanese["tandem"]["served_by"] == "gateway"
        time.sleep(0.3)
        assert proxy.connections == seen
    finally:
        proxy.close()


@pytest.mark.parametrize("privacy", ["Confidential", "PII", ["PII"], "internal,Private"])
def test_app_tags_in_any_case_stay_on_the_device(stack, privacy):
    gateway, agent = stack
    before = gateway_requests(gateway)
    with Client(gateway, local_agent_url=agent) as client:
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, privacy=privacy
        )
    assert reply["tandem"]["served_by"] == "local-agent"
    assert gateway_requests(gateway) == before


def test_tags_outside_the_sdks_set_are_forwarded_and_the_gateway_decides(demo_checkpoint, tmp_path):
    """`internal` is not private to the SDK; a gateway whose policy says it is keeps it on the edge."""
    from tests.stack import DEFAULT_POLICY

    policy = yaml.safe_load(DEFAULT_POLICY.read_text())
    policy["privacy"]["never_leave_device"].append("internal")
    policy["rules"][0]["match"]["privacy"].append("internal")
    policy["pools"]["cloud"]["endpoints"] = [f"grpc://127.0.0.1:{free_port()}"]
    policy["pools"]["edge"]["endpoints"] = [f"grpc://127.0.0.1:{free_port()}"]
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    stack = start_local_stack(demo_checkpoint, tmp_path / "policy.yaml", tmp_path, free_port())
    try:
        with Client(stack.url, local_agent_url=None) as client:
            reply = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, privacy="Internal"
            )
        assert reply["tandem"]["served_by"] == "gateway" and reply["tandem"]["route"] == "edge; rule=private"
    finally:
        stack.stop()


def test_a_grammar_that_fails_on_the_device_is_refused_as_the_gateway_refuses_it(stack):
    """(a review) The local agent's 400 for a grammar that failed mid-answer said no code, where the gateway's says
    `invalid_request` and names `response_format`."""
    from tandem_sdk import APIError

    late = {"type": "object", "required": ["a", "b"], "properties": {"a": {"enum": ["x", "y"]}, "b": {
        "type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(700)}}}}  # fmt: skip
    gateway, agent = stack
    with Client(gateway, local_agent_url=agent) as client, pytest.raises(APIError) as refused:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=60, temperature=0, privacy="private",
            response_format={"type": "json_schema", "json_schema": {"name": "late", "schema": late}},
        )  # fmt: skip
    assert refused.value.status == 400 and refused.value.code == "invalid_request"
    assert refused.value.message.startswith("response_format: the grammar failed mid-answer")


@pytest.mark.parametrize("how", ["aclose", "async with"])
def test_an_async_stream_stopped_early_as_documented_leaves_no_error(stack, how, caplog):
    """(a review) `break` out of `async for`, then `await stream.aclose()` (or leave `async with stream:`): the
    iterator left behind was closed later by the event loop, which closed the request a second time while the app's
    own close was at it, and "Task exception was never retrieved" was in the app's log."""
    gateway, _ = stack
    ask = [{"role": "user", "content": "write a long story"}]

    async def run():
        async with AsyncClient(gateway, local_agent_url=None) as client:
            stream = await client.chat.completions.create(model=MODEL, messages=ask, max_tokens=200, stream=True)
            if how == "aclose":
                async for _ in stream:
                    break
                await stream.aclose()
            else:
                async with stream:
                    async for _ in stream:
                        break
            await asyncio.sleep(0.2)
            gc.collect()
            await asyncio.sleep(0.2)

    with caplog.at_level("ERROR"):
        asyncio.run(run())
        gc.collect()
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text

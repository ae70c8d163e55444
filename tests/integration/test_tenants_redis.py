"""Tenants and limits with real processes: keys, 429 + Retry-After shared by two replicas through Redis."""

import socket
import time

import httpx
import pytest

from gateway.tenants import hash_key
from tandem.stack import start_local_stack
from tests.conftest import free_port
from tests.stack import start_gateway, write_policy

pytestmark = pytest.mark.integration
ACME, GLOBEX, OPS = "k-acme-secret", "k-globex-secret", "ops-secret"
BODY = {"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def tenants_file(path):
    path.write_text(
        "tenants:\n"
        f"  acme: {{keys: ['{hash_key(ACME)}'], requests_per_minute: 4, tokens_per_minute: 100000}}\n"
        f"  globex: {{keys: ['{hash_key(GLOBEX)}']}}\n"
    )
    return path


@pytest.fixture
def two_replicas(demo_checkpoint, tmp_path, redis_url):
    policy = write_policy(tmp_path / "policy.yaml", free_port(), free_port())
    env = {
        "TANDEM_TENANTS_FILE": str(tenants_file(tmp_path / "tenants.yaml")),
        "REDIS_URL": redis_url,
        "TANDEM_OPS_TOKEN": OPS,
    }
    stack = start_local_stack(demo_checkpoint, policy, tmp_path, free_port(), env)
    port = free_port()
    second = start_gateway(demo_checkpoint, policy, port, env | {"TANDEM_SHOW_BACKEND_ADDRESSES": "true"})
    yield stack.url, f"http://127.0.0.1:{port}"
    second.stop()
    stack.stop()


def post(url, key, body=BODY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def test_keys_decide_the_tenant_and_a_limit_holds_across_replicas(two_replicas, redis_url):
    a, b = two_replicas
    assert post(a, None).status_code == 401
    assert post(a, "not-a-key").json()["error"]["code"] == "invalid_api_key"

    answers = [post(url, ACME) for url in (a, b, a, b)]
    assert [r.status_code for r in answers] == [200, 200, 200, 200]  # acme's 4 a minute, spent through both replicas
    # OpenAI's rate-limit headers, from the buckets both replicas share
    assert [r.headers["x-ratelimit-remaining-requests"] for r in answers] == ["3", "2", "1", "0"]
    assert {r.headers["x-ratelimit-limit-requests"] for r in answers} == {"4"}
    assert answers[-1].headers["x-ratelimit-reset-requests"].endswith("s")  # e.g. 59.9s: when it is full again
    assert answers[0].headers["x-ratelimit-limit-tokens"] == "100000"
    assert 99_000 < int(answers[0].headers["x-ratelimit-remaining-tokens"]) < 100_000  # prompt + max_tokens charged
    refused = post(b, ACME)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert "acme" in refused.json()["error"]["message"]
    assert refused.json()["error"]["type"] == "requests"  # OpenAI's type names the limit (requests or tokens)
    other = post(a, GLOBEX)
    assert other.status_code == 200  # another tenant is not affected
    assert not any(name.startswith("x-ratelimit-") for name in other.headers)  # it has no limits to tell

    explained = httpx.post(f"{a}/v1/route/explain", json=BODY, headers={"Authorization": f"Bearer {GLOBEX}"})
    assert explained.json()["features"]["tenant"] == "globex"  # the key decides
    claimed = httpx.post(
        f"{a}/v1/route/explain", json=BODY, headers={"Authorization": f"Bearer {GLOBEX}", "X-Tandem-Tenant": "acme"}
    )
    assert claimed.status_code == 400 and claimed.json()["error"]["param"] == "X-Tandem-Tenant"
    assert httpx.get(f"{a}/metrics").status_code == 401  # every tenant's traffic: for the ops token only
    metrics = httpx.get(f"{a}/metrics", headers={"Authorization": f"Bearer {OPS}"}).text
    assert 'tandem_gateway_rate_limit_mode{mode="redis"} 1.0' in metrics
    ready = httpx.get(f"{a}/readyz", headers={"Authorization": f"Bearer {OPS}"}).json()
    assert ready["redis"] == {"answering": True, "last_error": None}


def test_a_caller_learns_no_backend_address_unless_the_settings_open_them(two_replicas):
    """Every answer's X-Tandem-Backend and explain's candidates named the backends' addresses to any caller with a
    key. Now a label (the pool and the backend's place in it); the second replica opens addresses in its settings."""
    closed, opened = two_replicas
    reply = post(closed, GLOBEX)
    assert reply.status_code == 200 and reply.headers["x-tandem-backend"] == "cloud/0"
    explained = httpx.post(f"{closed}/v1/route/explain", json=BODY, headers={"Authorization": f"Bearer {GLOBEX}"})
    assert explained.json()["pick"] == {"pool": "cloud", "backend": "cloud/0"}
    assert "127.0.0.1" not in explained.text and "grpc://" not in explained.text
    assert [c["backend"] for c in explained.json()["candidates"]] == ["cloud/0", "edge/0"]  # (the fallback)

    address = post(opened, GLOBEX).headers["x-tandem-backend"]
    assert address.startswith("grpc://127.0.0.1:")
    explained = httpx.post(f"{opened}/v1/route/explain", json=BODY, headers={"Authorization": f"Bearer {GLOBEX}"})
    assert explained.json()["pick"] == {"pool": "cloud", "backend": "cloud/0", "endpoint": address}


def test_without_redis_limits_hold_per_replica_and_requests_still_succeed(demo_checkpoint, tmp_path):
    policy = write_policy(tmp_path / "policy.yaml", free_port(), free_port())
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    env = {"TANDEM_TENANTS_FILE": str(tenants_file(tmp_path / "tenants.yaml")), "REDIS_URL": dead_redis}
    stack = start_local_stack(demo_checkpoint, policy, tmp_path, free_port(), env)
    try:
        # said at start, before any request: the gateway logged "reading workers' hints from Redis" and showed
        # both modes on Redis until a request found it down
        metrics = httpx.get(f"{stack.url}/metrics", headers=stack.ops_headers).text
        assert 'tandem_gateway_rate_limit_mode{mode="local"} 1.0' in metrics
        assert 'tandem_gateway_prefix_hint_mode{mode="approximate"} 1.0' in metrics
        log = next(c for c in stack.children if c.name == "gateway").log_path.read_text()
        assert "did not answer" in log and dead_redis.split("//")[1].split("/")[0] in log
        assert "from Redis" not in log and "shared through Redis" not in log
        answers = [post(stack.url, ACME) for _ in range(5)]
        assert [r.status_code for r in answers] == [200, 200, 200, 200, 429]
        assert [r.headers["x-ratelimit-remaining-requests"] for r in answers] == ["3", "2", "1", "0", "0"]
        metrics = httpx.get(f"{stack.url}/metrics", headers=stack.ops_headers).text
        assert 'tandem_gateway_rate_limit_mode{mode="local"} 1.0' in metrics
    finally:
        stack.stop()


def test_a_key_removed_from_the_tenants_file_stops_working_without_a_restart(demo_checkpoint, tmp_path):
    """(a review) The tenants file was read once: deleting a leaked key's hash did nothing until every replica was
    restarted. Now it is read again when it changes (an editor's rename here); a change that cannot be used is
    refused, said in the log and counted, and the tenants before it keep serving."""
    policy = write_policy(tmp_path / "policy.yaml", free_port(), free_port())
    listed = tenants_file(tmp_path / "tenants.yaml")
    stack = start_local_stack(demo_checkpoint, policy, tmp_path, free_port(), {"TANDEM_TENANTS_FILE": str(listed)})
    gateway_log = next(c for c in stack.children if c.name == "gateway").log_path
    try:
        assert post(stack.url, ACME).status_code == 200
        assert keyless_answer_before_its_body(stack.url).startswith(b"HTTP/1.1 401")
        edited = tmp_path / "tenants.yaml.new"
        edited.write_text(f"tenants:\n  globex: {{keys: ['{hash_key(GLOBEX)}']}}\n")
        edited.replace(listed)  # acme's key revoked, as an editor saves
        assert until(lambda: post(stack.url, ACME).status_code == 401)
        assert post(stack.url, GLOBEX).status_code == 200

        listed.write_text("tenants:\n  globex: {keys: [oops\n")  # broken YAML: refused, globex still served
        assert until(lambda: "tenants file change refused" in gateway_log.read_text())
        assert "tenants.yaml:3: not valid YAML" in gateway_log.read_text()  # where it broke
        assert post(stack.url, GLOBEX).status_code == 200 and post(stack.url, ACME).status_code == 401
        metrics = httpx.get(f"{stack.url}/metrics", headers=stack.ops_headers).text
        assert 'tandem_gateway_tenants_reloads_total{result="ok"} 1.0' in metrics
        assert 'tandem_gateway_tenants_reloads_total{result="error"} 1.0' in metrics
    finally:
        stack.stop()


def test_a_stream_stopped_early_gives_back_the_tokens_it_did_not_use(demo_checkpoint, tmp_path):
    """(a review) A chat UI's Stop closes the stream after a few tokens; the tenant stayed charged its whole
    max_tokens, so two stopped answers left it 429s for a minute. Now it keeps its prompt and what it was sent."""
    policy = write_policy(tmp_path / "policy.yaml", free_port(), free_port())
    listed = tmp_path / "tenants.yaml"
    listed.write_text(f"tenants:\n  acme: {{keys: ['{hash_key(ACME)}'], tokens_per_minute: 1000}}\n")
    stack = start_local_stack(demo_checkpoint, policy, tmp_path, free_port(), {"TANDEM_TENANTS_FILE": str(listed)})
    headers = {"Authorization": f"Bearer {ACME}"}
    try:
        for _ in range(2):
            body = BODY | {"max_tokens": 450, "stream": True}
            with httpx.stream("POST", f"{stack.url}/v1/chat/completions", json=body, headers=headers) as streamed:
                assert streamed.status_code == 200
                lines = streamed.iter_lines()
                next(line for line in lines if line.startswith("data:") and '"content"' in line)
            # the client is gone here: its stream ends on the gateway, and the refund follows
        time.sleep(1.0)
        after = post(stack.url, ACME, BODY | {"max_tokens": 300})
        assert after.status_code == 200, after.text  # (it was a 429: 900 of 1,000 tokens held by the two)
        assert int(after.headers["x-ratelimit-remaining-tokens"]) > 400  # 1,000 - 2 x (prompt + a few) - 300 - prompt
    finally:
        stack.stop()


def until(check, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def keyless_answer_before_its_body(url: str) -> bytes:
    """(a review) A caller without a key had its body read first, up to the 2 MiB limit, however slowly it came:
    the 401 now comes with a kilobyte of a declared megabyte sent."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000\r\n\r\n" + b"{" + b" " * 1023
        )
        return sock.recv(4096)  # within the 5 s timeout, or a TimeoutError

"""Secure by default, tried as a caller would: keys unless `auth: none` is written, ops-only metrics, bounded input.

The gateway runs in-process (FastAPI's TestClient runs its lifespan); its
backends do not exist, which these requests never need.
"""

import gzip
import json

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import ValidationError

from gateway.config import Settings, get_settings
from gateway.lifespan import ConfigError
from gateway.main import create_app
from gateway.tenants import Tenants, TenantsError, TenantsFile, hash_key
from tests.stack import DEFAULT_POLICY

KEY, OTHER_KEY, OPS = "tdm-acme-key", "tdm-globex-key", "ops-secret"
ASK = {"model": "tandem-demo", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def settings(demo_checkpoint, tmp_path, **overrides) -> Settings:
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tenants": {"acme": {"requests_per_minute": 3}}}))
    base = dict(
        model_dir=demo_checkpoint,
        policy_file=DEFAULT_POLICY,
        api_keys=[f"acme:{KEY}", f"globex:{OTHER_KEY}"],
        tenants_file=tenants,
        ops_token=OPS,
        watch_policy=False,
        max_body_bytes=64 * 1024,
    )
    return Settings(**(base | overrides))


@pytest.fixture
def gateway(demo_checkpoint, tmp_path):
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: settings(demo_checkpoint, tmp_path)  # read when the app starts
    with TestClient(app) as client:
        yield client


def test_without_an_override_the_app_runs_on_the_tandem_variables(demo_checkpoint, monkeypatch, request):
    get_settings.cache_clear()  # read once per process: from the variables set below, and forgotten after
    request.addfinalizer(get_settings.cache_clear)
    monkeypatch.setenv("TANDEM_MODEL_DIR", str(demo_checkpoint))
    monkeypatch.setenv("TANDEM_POLICY_FILE", str(DEFAULT_POLICY))
    monkeypatch.setenv("TANDEM_API_KEYS", f"acme:{KEY}")
    monkeypatch.setenv("TANDEM_WATCH_POLICY", "false")
    monkeypatch.setenv("TANDEM_MAX_BODY_BYTES", "2000")
    with TestClient(create_app()) as client:
        assert client.get("/v1/models", headers=bearer(OTHER_KEY)).status_code == 401
        assert client.get("/v1/models", headers=bearer(KEY)).json()["data"][0]["id"] == "tandem-demo"
        big = ASK | {"messages": [{"role": "user", "content": "x" * 3000}]}
        reply = client.post("/v1/chat/completions", json=big, headers=bearer(KEY))
        assert reply.status_code == 413 and "at most 2000" in reply.json()["error"]["message"]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_no_keys_and_no_auth_none_refuses_to_start(demo_checkpoint, tmp_path):
    with pytest.raises(ConfigError, match="TANDEM_AUTH=none"):
        with TestClient(create_app(settings(demo_checkpoint, tmp_path, api_keys=[], tenants_file=None))):
            pass


def test_auth_none_written_out_is_open(demo_checkpoint, tmp_path):
    open_settings = settings(demo_checkpoint, tmp_path, api_keys=[], tenants_file=None, ops_token=None, auth="none")
    with TestClient(create_app(open_settings)) as client:
        explained = client.post("/v1/route/explain", json=ASK, headers={"X-Tandem-Tenant": "t1"})
        assert explained.status_code == 200 and explained.json()["features"]["tenant"] == "t1"
        # a tenant's name labels every metric: not any text a caller sends (an adversarial review)
        for named in ("", "a b", "../../etc", "x" * 65, "t\u00fc".encode()):
            refused = client.post("/v1/route/explain", json=ASK, headers={"X-Tandem-Tenant": named})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "X-Tandem-Tenant", named
        twice = client.post("/v1/route/explain", json=ASK, headers=[("X-Tandem-Tenant", "a"), ("X-Tandem-Tenant", "b")])
        assert twice.status_code == 400
        assert client.get("/metrics").status_code == 200
        assert "/v1/chat/completions" in client.get("/openapi.json").json()["paths"]
        assert client.get("/docs").status_code == 200


def test_auth_none_keeps_a_bounded_number_of_tenants_apart(demo_checkpoint, tmp_path, monkeypatch):
    """Each X-Tandem-Tenant name labels the tenant metrics: 5,000 names in 3 s made 5,000 more series, and memory
    grew without end (a review). Past the bound a new name is a 400; names already served go on."""
    from gateway import auth

    monkeypatch.setattr(auth, "MAX_NAMED_TENANTS", 3)
    open_settings = settings(demo_checkpoint, tmp_path, api_keys=[], tenants_file=None, ops_token=None, auth="none")
    with TestClient(create_app(open_settings)) as client:
        for name in ("t1", "t2", "t3"):
            assert client.post("/v1/route/explain", json=ASK, headers={"X-Tandem-Tenant": name}).status_code == 200
        refused = client.post("/v1/route/explain", json=ASK, headers={"X-Tandem-Tenant": "t4"})
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "X-Tandem-Tenant"
        assert "keys" in refused.json()["error"]["message"]
        assert client.post("/v1/route/explain", json=ASK, headers={"X-Tandem-Tenant": "t2"}).status_code == 200


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/redoc"])
def test_the_api_description_needs_a_key_like_the_api(gateway, path):
    refused = gateway.get(path)
    assert refused.status_code == 401 and "API key" in refused.json()["error"]["message"]
    served = gateway.get(path, headers=bearer(KEY))
    assert served.status_code == 200
    if path == "/openapi.json":
        assert "/v1/chat/completions" in served.json()["paths"] and "/openapi.json" not in served.json()["paths"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), (bearer("guessed"), 401), (bearer(KEY) | {"X-Tandem-Tenant": "globex"}, 400), (bearer(KEY), 200)],
)
def test_the_key_decides_the_tenant(gateway, headers, status):
    reply = gateway.post("/v1/route/explain", json=ASK, headers=headers)
    assert reply.status_code == status, reply.text
    if status == 200:
        assert reply.json()["features"]["tenant"] == "acme"
    if status == 400:
        assert reply.json()["error"]["param"] == "X-Tandem-Tenant"


@pytest.mark.parametrize(("headers", "status"), [({}, 401), (bearer(KEY), 401), (bearer(OPS), 200)])
def test_metrics_need_the_ops_token(gateway, headers, status):
    assert gateway.get("/metrics", headers=headers).status_code == status


def test_readyz_says_only_ready_without_the_ops_token(gateway):
    assert set(gateway.get("/readyz").json()) == {"ready"}
    assert {"backends", "policy", "edge_agents"} <= set(gateway.get("/readyz", headers=bearer(OPS)).json())


def test_an_operator_finds_the_backend_a_caller_names_by_its_label(gateway):
    """Callers read a label (X-Tandem-Backend: cloud/0, in explain and errors); the operators' /readyz says which
    address each label is (a review: nothing mapped one to the other but the log's failure lines)."""
    backends = gateway.get("/readyz", headers=bearer(OPS)).json()["backends"]
    assert {address: b["labels"] for address, b in backends.items()} == {
        "grpc://127.0.0.1:50051": ["cloud/0"],
        "grpc://127.0.0.1:50061": ["edge/0"],
    }
    explained = gateway.post("/v1/route/explain", json=ASK, headers=bearer(KEY)).json()
    assert {c["backend"] for c in explained["candidates"]} <= {"cloud/0", "edge/0"}
    assert "endpoint" not in explained["candidates"][0]


def test_a_priority_above_the_tenants_allowance_is_clamped(gateway):
    reply = gateway.post("/v1/route/explain", json=ASK | {"priority": 2**31 - 1}, headers=bearer(KEY))
    assert reply.json()["features"]["priority"] == 0


def test_explain_is_rate_limited_like_generation(gateway):
    statuses = [gateway.post("/v1/route/explain", json=ASK, headers=bearer(KEY)).status_code for _ in range(5)]
    assert statuses[:3] == [200, 200, 200] and statuses[3:] == [429, 429]
    assert gateway.post("/v1/route/explain", json=ASK, headers=bearer(OTHER_KEY)).status_code == 200  # per tenant


IMAGE = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}


@pytest.mark.parametrize(
    ("change", "param", "says"),
    [
        ({"stop": "x" * 257}, "stop", "a stop sequence is at most 256 characters; one has 257"),
        ({"stop": ["ok", "x" * 257]}, "stop", "a stop sequence is at most 256 characters; one has 257"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "at most 4 stop sequences"),
        ({"priority": 2**31}, "priority", "priority"),
        ({"top_k": 2**31}, "top_k", "top_k"),
        ({"temperature": 3}, "temperature", "temperature"),
        ({"metadata": {"privacy": 7}}, "metadata.privacy", "privacy"),
        ({"metadata": {"local_only": True}}, "metadata.local_only", "privacy tags go in metadata.privacy"),  # first
        ({"metadata": {"a": 1}}, "metadata.a", "values are strings of at most 512 characters"),
        ({"messages": [{"role": "user", "content": [IMAGE]}]}, "messages[0].content",
         "parts of type 'image_url' are not supported: Tandem serves text"),
        ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content",
         "a text part needs `text`"),
    ],
)  # fmt: skip
def test_out_of_bounds_fields_are_a_400_naming_the_field_in_words(gateway, change, param, says):
    reply = gateway.post("/v1/route/explain", json=ASK | change, headers=bearer(KEY))
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"].startswith(param) and says in error["message"], error
    assert "Value error" not in error["message"] and "a valid string" not in error["message"]  # pydantic's union noise


@pytest.mark.parametrize(("headers", "status"), [({}, 401), (bearer(KEY), 413)])
def test_a_body_over_the_limit_is_refused_before_it_is_parsed(gateway, headers, status):
    """A caller without a key gets its 401 before any of the body is read (a review: it was read first)."""
    big = ASK | {"messages": [{"role": "user", "content": "x" * 70_000}]}
    reply = gateway.post("/v1/chat/completions", json=big, headers=headers)
    assert reply.status_code == status
    if status == 413:
        assert reply.json()["error"]["code"] == "request_too_large" and "TANDEM_MAX_BODY_BYTES" in reply.text

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(20):
            yield b"x" * 8192

    assert gateway.post("/v1/chat/completions", content=chunks(), headers=headers).status_code == status


@pytest.mark.parametrize("encoding", ["gzip", "br", "deflate, gzip"])
def test_a_compressed_body_is_refused_naming_content_encoding(gateway, encoding):
    """Nothing decompresses a body: gzip was a 400 about JSON text encodings, and `br` on a plain body was ignored."""
    body = json.dumps(ASK).encode()
    sent = gzip.compress(body) if encoding == "gzip" else body
    headers = bearer(KEY) | {"Content-Type": "application/json"}
    reply = gateway.post("/v1/chat/completions", content=sent, headers=headers | {"Content-Encoding": encoding})
    assert reply.status_code == 415
    error = reply.json()["error"]
    assert error["param"] == "Content-Encoding" and "uncompressed" in error["message"]
    plain = gateway.post("/v1/chat/completions", content=body, headers=headers | {"Content-Encoding": "identity"})
    assert plain.status_code != 415  # (no worker runs here: what it gets is routing's answer)


PREFLIGHT = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}  # fmt: skip


def test_no_origin_may_call_from_a_browser_unless_configured(gateway):
    reply = gateway.options("/v1/chat/completions", headers=PREFLIGHT)
    assert "access-control-allow-origin" not in reply.headers
    answer = gateway.post("/v1/route/explain", json=ASK, headers=bearer(KEY) | {"Origin": "https://app.example.com"})
    assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers


def test_configured_origins_get_cors_and_still_need_a_key(demo_checkpoint, tmp_path):
    app = create_app()
    opened = settings(demo_checkpoint, tmp_path, cors_origins="https://app.example.com, https://lab.example.com")
    app.dependency_overrides[get_settings] = lambda: opened
    with TestClient(app) as client:
        reply = client.options("/v1/chat/completions", headers=PREFLIGHT)  # no key: browsers send none on a preflight
        assert reply.status_code == 200
        assert reply.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "x-stainless-os" in reply.headers["access-control-allow-headers"].lower()
        other = client.options("/v1/chat/completions", headers=PREFLIGHT | {"Origin": "https://evil.example"})
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
        origin = {"Origin": "https://lab.example.com"}
        answer = client.post("/v1/route/explain", json=ASK, headers=bearer(KEY) | origin)
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == "https://lab.example.com"
        assert "x-request-id" in answer.headers["access-control-expose-headers"].lower()
        assert client.post("/v1/route/explain", json=ASK, headers=origin).status_code == 401


def test_the_cache_salt_is_an_hmac_the_tenant_name_does_not_open():
    secret = b"k8s-secret"
    one, replica, other_secret = Tenants(TenantsFile(), secret), Tenants(TenantsFile(), secret), Tenants(TenantsFile())
    assert one.cache_salt("acme") == replica.cache_salt("acme")  # replicas with the same secret agree
    assert one.cache_salt("acme") not in ("acme", one.cache_salt("globex"), other_secret.cache_salt("acme"))
    assert len(one.cache_salt("acme")) == 32


@pytest.mark.parametrize(
    ("body", "headers", "param"),
    [
        ('{"model": "tandem-demo", "messages": [{"role": "user", "content": "\\ud800"}]}', {}, "messages"),
        ('{"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}], "user": "\\udfff"}', {}, "user"),
        ('{"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}], "stop": ["\\ud800"]}', {}, "stop"),
        (ASK, {"X-Tandem-Device": '{"cores": 1e999}'}, None),
        # (a review) numbers JSON cannot write back, in a schema: the grammar compiler's "expected value at column 70"
        (
            '{"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", '
            '"function": {"name": "f", "parameters": {"type": "number", "maximum": 1e999}}}], "tool_choice": "required"}',
            {},
            "tools",
        ),
        (
            '{"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}], "metadata": {"x": NaN}}',
            {},
            "metadata",
        ),
        (
            '{"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": '
            '"json_schema", "json_schema": {"name": "n", "schema": {"type": "number", "minimum": -Infinity}}}}',
            {},
            "response_format",
        ),
        (ASK, {"X-Tandem-Device": "[" * 5000 + "]" * 5000}, None),
    ],
)
def test_hostile_input_is_a_400_never_a_500(gateway, body, headers, param):
    content = body if isinstance(body, str) else None
    reply = gateway.post(
        "/v1/route/explain",
        content=content,
        json=None if content else body,
        headers=bearer(KEY) | {"Content-Type": "application/json"} | headers,
    )
    assert reply.status_code == 400, reply.text
    if param:
        assert reply.json()["error"]["param"].startswith(param)


def test_a_responses_tool_with_a_number_json_cannot_write_is_a_400_not_a_500_after_the_answer(gateway):
    """(a review) /v1/responses echoes its tools in the envelope: `maximum: 1e999` (valid JSON, read as infinity)
    answered, then failed to encode as a 500; streamed, its events carried `NaN`, which strict JSON parsers refuse."""
    tools = (
        '[{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"x": {"maximum": 1e999}}}}]'
    )
    body = '{"model": "tandem-demo", "input": "x", "max_output_tokens": 2, "tools": ' + tools + "}"
    reply = gateway.post("/v1/responses", content=body, headers=bearer(KEY) | {"Content-Type": "application/json"})
    assert reply.status_code == 400 and reply.json()["error"]["param"].startswith("tools"), reply.text


def test_a_body_that_does_not_parse_gets_openais_error_shape(gateway):
    reply = gateway.post("/v1/chat/completions", content=b"{" * 10 + b'"', headers=bearer(KEY))
    assert reply.status_code == 400 and set(reply.json()["error"]) >= {"message", "type", "code"}
    assert gateway.get("/v1/no-such-route", headers=bearer(KEY)).json()["error"]["type"] == "invalid_request_error"


def test_a_refused_request_costs_no_tokenization(gateway, monkeypatch):
    """Rate limits are checked before the prompt is tokenized and scanned."""
    for _ in range(3):
        assert gateway.post("/v1/route/explain", json=ASK, headers=bearer(KEY)).status_code == 200
    tokenized = []
    tokenizer = next(iter(gateway.app.state.gateway.models.values())).tokenizer
    monkeypatch.setattr(tokenizer, "encode_chat", lambda messages: tokenized.append(messages) or [1])
    assert gateway.post("/v1/route/explain", json=ASK, headers=bearer(KEY)).status_code == 429
    assert tokenized == []


def test_detection_off_is_logged_at_start(demo_checkpoint, tmp_path, caplog):
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        DEFAULT_POLICY.read_text().replace("detectors: [email, phone, credit-card, cn-id, iban, ssn]", "detectors: []")
    )
    with caplog.at_level("WARNING", logger="gateway.main"):
        with TestClient(create_app(settings(demo_checkpoint, tmp_path, policy_file=policy))):
            pass
    assert any("PII detection is OFF" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("min_p", [-0.1, 1.5])
def test_min_p_is_bounded(gateway, min_p):
    reply = gateway.post("/v1/route/explain", json=ASK | {"min_p": min_p}, headers=bearer(KEY))
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "min_p"


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (dict(tenants_file=None, ops_token=None), "TANDEM_API_KEYS"),
        (dict(api_keys=[], tenants_file=None), "TANDEM_OPS_TOKEN"),
        (dict(api_keys=[], ops_token=None), "TANDEM_TENANTS_FILE"),
    ],
)
def test_auth_none_beside_keys_or_an_ops_token_is_refused(demo_checkpoint, tmp_path, overrides, named):
    """A leftover TANDEM_AUTH=none would open a gateway whose keys were configured, silently."""
    with pytest.raises(ValidationError, match=named):
        settings(demo_checkpoint, tmp_path, auth="none", **overrides)


def test_an_ops_token_that_is_also_a_tenants_key_is_refused(demo_checkpoint, tmp_path):
    """(a review) TANDEM_OPS_TOKEN equal to a tenant's key started: that tenant's key then read /metrics (every
    tenant's traffic) and /readyz's backend addresses, which callers with a key are never to learn."""
    from gateway.lifespan import preflight

    with pytest.raises(ConfigError, match="TANDEM_OPS_TOKEN is also tenant 'acme'"):
        preflight(settings(demo_checkpoint, tmp_path, ops_token=KEY))
    app = create_app()
    app.dependency_overrides[get_settings] = lambda: settings(demo_checkpoint, tmp_path, ops_token=KEY)
    with pytest.raises(ConfigError, match="an operator's token must be a secret of its own"):
        with TestClient(app):
            pass


@pytest.mark.parametrize(
    ("field", "value"),
    [("host", ""), ("port", 99999), ("port", 0), ("health_interval_s", 0), ("health_interval_s", float("nan")),
     ("first_token_deadline_s", -1), ("backend_timeout_s", -1), ("attempt_timeout_s", float("nan")),
     ("default_max_tokens", 0), ("breaker_open_s", float("inf")), ("shutdown_grace_s", float("inf")),
     ("edge_token", "s\u00e9cret"), ("ops_token", "two words"), ("backend_timeout_s", 1e10),
     ("stream_idle_timeout_s", 1e300), ("drain_delay_s", 1e9), ("host", " "), ("host", "256.1.1.1")],
)  # fmt: skip
def test_a_setting_that_would_break_every_request_is_refused_at_start(demo_checkpoint, tmp_path, field, value):
    with pytest.raises(ValidationError, match=field):
        settings(demo_checkpoint, tmp_path, **{field: value})


def test_a_token_outside_ascii_is_a_401_not_a_500(demo_checkpoint, tmp_path):
    with TestClient(create_app(settings(demo_checkpoint, tmp_path, edge_token="s3cret"))) as client:
        for value in ("Bearer s\u00e9cret".encode(), "Bearer s\u00e9cret".encode("latin-1")):
            assert client.post("/v1/edge/register", json={}, headers={"Authorization": value}).status_code == 401
            assert client.get("/metrics", headers={"Authorization": value}).status_code == 401


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        (["acme:k1", "globex:k1"], "tenants 'acme' and 'globex'"),
        (["acme:"], "empty key"),
        ([":k"], "empty tenant"),
        (["acme:k\u00e9y"], "not printable ASCII"),
    ],
)
def test_keys_that_would_name_no_tenant_or_two_are_refused(keys, said):
    with pytest.raises(TenantsError, match=said):
        Tenants.load(None, keys, b"s")


@pytest.mark.parametrize("name", ["", "a\nadmin", " acme", "acme\t", "x" * 257])
def test_a_tenant_name_no_log_line_carries_whole_is_refused(tmp_path, name):
    """(a review) `tandem keys new` printed a line for any name: a line break in it made a second tenant."""
    listed = tmp_path / "tenants.yaml"
    listed.write_text(yaml.safe_dump({"tenants": {name: {"keys": [hash_key("k")]}}}))
    with pytest.raises(TenantsError, match="a tenant's name is"):
        Tenants.load(listed, [], b"s")
    if name:
        with pytest.raises(TenantsError, match="a tenant's name is"):
            Tenants.load(None, [f"{name}:k"], b"s")


@pytest.mark.parametrize("name", ["acme@corp", "team/ml", "Acme Corp", "müller", "_internal", "x" * 70, "#x"])
def test_the_names_tenants_had_before_names_were_checked_still_load(tmp_path, name):
    """(a second review) A rule as strict as X-Tandem-Tenant's stopped a gateway whose tenants were named so from
    starting, and renaming one changes its cache salt, its Redis buckets and its metrics."""
    listed = tmp_path / "tenants.yaml"
    listed.write_text(yaml.safe_dump({"tenants": {name: {"keys": [hash_key("k")]}}}))
    assert Tenants.load(listed, [], b"s").authenticate("k") == name
    assert Tenants.load(None, [f"{name}:k2"], b"s").authenticate("k2") == name


def test_a_name_yaml_reads_as_a_number_says_to_quote_it_on_its_line(tmp_path):
    listed = tmp_path / "tenants.yaml"
    listed.write_text(f"tenants:\n  acme: {{keys: ['{hash_key('a')}']}}\n  123: {{keys: ['{hash_key('b')}']}}\n")
    with pytest.raises(TenantsError, match="tenants.yaml:3: tenants: 123: YAML reads this name as a number; write"):
        Tenants.load(listed, [], b"s")


def test_the_yaml_people_write_in_a_tenants_file_still_loads(tmp_path):
    """(a second review) Read as the policy is, `250_000` and two merge keys in one mapping were refused."""
    listed = tmp_path / "tenants.yaml"
    listed.write_text(
        "tenants:\n  acme:\n    <<: {requests_per_minute: 1_000}\n    <<: {max_concurrent: 4}\n"
        f"    keys: ['{hash_key('k')}']\n    tokens_per_minute: 250_000\n"
    )
    limits = Tenants.load(listed, [], b"s").limits("acme")
    assert (limits.requests_per_minute, limits.tokens_per_minute, limits.max_concurrent) == (1000, 250000, 4)


@pytest.mark.parametrize(
    "name", ["true", "123", "null", "1e3", "#x", "a: b", "acme@corp", "team/ml", "#launch 🚀", "[𝔘]", "a: é"]
)
def test_keys_new_prints_a_line_the_gateway_reads_as_that_tenant(tmp_path, name):
    """`true: {keys: …}` is a key YAML reads as a truth, not a name: the line quotes it where YAML would. A quoted
    name with a character past U+FFFF was written in JSON's escapes (`\\ud83d\\ude80`), which YAML refuses: the
    gateway did not start after the paste (a review)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tandem.cli", "keys", "new", name], capture_output=True, text=True)
    key = done.stdout.split("key (shown once):")[1].split()[0]
    lines = done.stdout.splitlines()
    listed = tmp_path / "tenants.yaml"  # the two lines it prints, as they are (the tenant's line alone was refused)
    listed.write_text("\n".join(lines[lines.index("tenants:") :]) + "\n")
    assert Tenants.load(listed, [], b"s").authenticate(key) == name
    refused = subprocess.run([sys.executable, "-m", "tandem.cli", "keys", "new", "a\nb"], capture_output=True,
                             text=True)  # fmt: skip
    assert refused.returncode == 2 and "a tenant's name is" in refused.stderr and not refused.stdout


def test_a_tenant_listed_twice_is_refused_naming_the_line(tmp_path):
    """(a review) Pasting `tandem keys new acme`'s line under an `acme` already there kept only the second: the old
    key stopped working and the tenant's limits were gone, unsaid."""
    listed = tmp_path / "tenants.yaml"
    listed.write_text(
        f"tenants:\n  acme:\n    keys: ['{hash_key('old')}']\n    requests_per_minute: 120\n"
        f"  acme: {{keys: ['{hash_key('new')}']}}\n"
    )
    with pytest.raises(TenantsError, match="tenants.yaml:5: key 'acme' is given twice"):
        Tenants.load(listed, [], b"s")


def test_a_key_may_hold_a_colon():
    tenants = Tenants.load(None, ["acme:pa:ss"], b"s")
    assert tenants._by_hash == {hash_key("pa:ss"): "acme"}


def test_explain_shows_the_policy_file_and_its_errors_to_operators_only(gateway):
    tenant = gateway.post("/v1/route/explain", json=ASK, headers=bearer(KEY)).json()["policy"]
    assert tenant.keys() == {"sha256", "loaded_at"}  # no file path, no refused edit's error


@pytest.mark.parametrize("body", [b"{not json", b'{"model": "tandem-demo", "messages": []}', b"x" * 50_000])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/route/explain"])
def test_a_caller_without_a_key_gets_a_401_whatever_the_body(gateway, path, body):
    """The body was parsed before the key was checked: a keyless caller got a 400 describing its invalid JSON (and
    had the gateway parse up to 2 MiB for it)."""
    reply = gateway.post(path, content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == 401 and "API key" in reply.json()["error"]["message"], reply.text


def test_the_model_list_with_a_trailing_slash_is_the_list(gateway):
    response = gateway.get("/v1/models/", headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200 and response.json()["object"] == "list", response.text


@pytest.mark.parametrize(
    ("method", "path", "says"),
    [
        ("POST", "/v1/chat/completions/", "did you mean /v1/chat/completions (no trailing slash)?"),  # was a 307
        ("POST", "/v1/embeddings", "Invalid URL (POST /v1/embeddings): Tandem serves /v1/chat/completions, "),
        ("GET", "/v1/responses/resp_123", "Tandem stores no responses"),
        # (a review) the client's responses.input_tokens.count: told it was about stored responses
        ("POST", "/v1/responses/input_tokens", "Tandem does not serve counting a request's input tokens"),
        ("GET", "/healthz/", "did you mean /healthz (no trailing slash)?"),  # only the /v1 routes were told
        ("GET", "/v1/route/explain/", "did you mean /v1/route/explain (no trailing slash)?"),
    ],
)
def test_a_url_not_served_is_a_404_that_says_what_is(gateway, method, path, says):
    response = gateway.request(method, path, json=ASK, headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 404
    error = response.json()["error"]
    assert says in error["message"] and error["code"] == "unknown_url", error


REGISTRATION = {
    "agent_id": "laptop-50062",
    "endpoint": "grpc://127.0.0.1:50062",
    "model": "tandem-demo",
    "execution_provider": "CPUExecutionProvider",
    "max_context_tokens": 2048,
    "device": {"execution_providers": ["CPUExecutionProvider"], "cores": 8, "network": "wifi"},
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("agent_id", "x\n2026-12-05 11:00:00,000 CRITICAL gateway.lifespan: privacy rules DISABLED"),
        ("agent_id", "a\x1b[31m"),
        ("agent_id", "a" * 129),
        ("endpoint", "grpc://h:1\r\nforged"),
        ("endpoint", "e" * 20_000),
        ("model", "m\u2028forged"),
        ("execution_provider", "CPU\nExecutionProvider"),
        ("device", {"execution_providers": ["CPU\x1b[0m"]}),
        ("device", {"network": "wifi\nforged"}),
    ],
)
def test_a_registration_no_log_line_carries_whole_is_refused(demo_checkpoint, tmp_path, caplog, field, value):
    """Every device holds the edge token: an agent_id with a line break wrote a forged line into the gateway's log,
    and ANSI escapes and a 20 KB line went there and into the spans (a review)."""
    with TestClient(create_app(settings(demo_checkpoint, tmp_path, edge_token="s3cret"))) as client:
        auth = {"Authorization": "Bearer s3cret"}
        response = client.post("/v1/edge/register", json={**REGISTRATION, field: value}, headers=auth)
        assert response.status_code == 400, response.text
        assert field in response.json()["error"]["param"]
        assert client.get("/v1/edge/agents", headers=auth).json() == {"agents": []}
        assert client.post("/v1/edge/register", json=REGISTRATION, headers=auth).status_code == 200
    assert "forged" not in caplog.text and "\x1b" not in caplog.text


@pytest.mark.parametrize(("allowed", "client"), [("", "127.0.0.1"), ("127.0.0.1", "203.0.113.9")])
async def test_x_forwarded_for_names_the_client_only_from_proxies_the_settings_name(
    demo_checkpoint, tmp_path, allowed, client
):
    """uvicorn alone read X-Forwarded-For from 127.0.0.1: any local process named the client, 8,000 characters of
    it in the span's client.address and the access log (a review)."""
    from gateway.server import uvicorn_config

    seen = {}

    async def app(scope, receive, send):
        seen["client"] = scope["client"][0]

    config = uvicorn_config(app, settings(demo_checkpoint, tmp_path, forwarded_allow_ips=allowed))
    config.load()
    scope = {"type": "http", "scheme": "http", "client": ("127.0.0.1", 5000), "headers": [
        (b"x-forwarded-for", b"203.0.113.9")]}  # fmt: skip
    await config.loaded_app(scope, None, None)
    assert seen["client"] == client

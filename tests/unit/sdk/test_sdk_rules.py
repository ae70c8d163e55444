"""The SDK's decisions before the network: privacy, loopback, device header."""

import contextlib
import http.server
import json
import ssl
import threading
import time

import pytest
from tandem_sdk import Client, PrivateRequestError, TagError, detect_device
from tandem_sdk.privacy import NEVER_LEAVE_DEVICE, check_loopback, private_reason
from tandem_sdk.tags import check_spelling, misplaced_privacy_key, normalize_tag, privacy_tags

from tests.local_agent_stand_in import health_answer

ASK = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.mark.parametrize(
    ("messages", "privacy", "expected"),
    [
        (ASK, None, None),
        (ASK, "private", "the app tagged it 'private'"),
        (ASK, ["confidential", "x"], "the app tagged it 'confidential'"),
        (ASK, "Confidential", "the app tagged it 'confidential'"),  # tags are read as the gateway reads them
        (ASK, "PII", "the app tagged it 'pii'"),
        (ASK, ["PII"], "the app tagged it 'pii'"),
        (ASK, "internal, Private", "the app tagged it 'private'"),
        (ASK, "public", None),  # any other tag: not private (it is forwarded; the gateway's policy decides)
        (ASK, "ｐｒｉｖａｔｅ", "the app tagged it 'private'"),  # full-width, as an IME types it
        (ASK, "internal、PII", "the app tagged it 'pii'"),  # an ideographic comma separates tags
        (ASK, "confi\u200bdential", "the app tagged it 'confidential'"),  # a zero-width space inside
        ([{"role": "user", "content": "mail ann@example.com"}], None, "the email detector fired on its text"),
        ([{"role": "user", "content": [{"type": "text", "text": "card 4111 1111 1111 1111"}]}], None,
         "the credit-card detector fired on its text"),
        ([{"role": "user", "content": "card 4111 1111 1111 1112"}], None, None),  # fails Luhn: not a card
    ],
)  # fmt: skip
def test_private_reason(messages, privacy, expected):
    assert private_reason({"messages": messages}, privacy_tags(privacy)) == expected


def test_the_never_leave_set_is_the_apps_to_choose():
    assert private_reason({"messages": ASK}, privacy_tags("internal"), never_leave={"internal"}) is not None
    assert private_reason({"messages": ASK}, privacy_tags("pii"), never_leave={"internal"}) is None


def test_text_outside_the_messages_is_scanned_too():
    for body in ({"messages": ASK, "stop": ["ann@example.com"]}, {"messages": ASK, "stop": ("ann@example.com",)}):
        assert private_reason(body) == "the email detector fired on its text"


def test_metadata_privacy_is_a_tag_to_the_sdk_as_to_the_gateway():
    client = Client("http://gw:8000")
    _, tags, reason = client._plan("m", ASK, False, None, {"metadata": {"privacy": "Private"}})
    assert tags == {"private"} and reason == "the app tagged it 'private'"


@pytest.mark.parametrize("bad", [3, {"pii": True}, ["pii", 2]])
def test_malformed_tags_are_refused_before_the_network(bad):
    with pytest.raises(TagError, match="privacy tags"):
        privacy_tags(bad)
    with pytest.raises(TagError):
        Client("http://gw:8000").chat.completions.create(model="m", messages=ASK, privacy=bad)


@pytest.mark.parametrize(
    ("tag", "meant"),
    [("privat", "private"), ("Privte", "private"), ("confidental", "confidential"), ("pi", "pii"), ("piii", "pii"),
     ("ｐｒｉｖａｔ", "private"), ("pil", "pii"), ("p1i", "pii"), ("pîi", "pii"), ("phi", "pii"), ("prviate", "private"),
     ("priv", "private"), ("conf", "confidential"), ("privacy", "private"),
     # variants that may mean the tag or its opposite: refused either way, the app says which in known_tags
     ("private-ok", "private"), ("not-private", "private"), ("#pii", "pii"), ("pii2", "pii"), ("unprivate", "private"),
     # (a review) the same letters parted, in lookalikes or small capitals, or a longer word: sent on before
     ("p.i.i.", "pii"), ("P I I", "pii"), ("p-i-i", "pii"), ("P\u0406\u0406", "pii"), ("p\u0131\u0131", "pii"),
     ("\u1d18\u0280\u026a\u1d20\u1d00\u1d1b\u1d07", "private"), ("confidentiality", "confidential")],
)  # fmt: skip
def test_a_misspelled_never_leave_tag_is_refused_before_the_network(tag, meant):
    """Sent on, "privat" would leave the device as an untagged request would."""
    with pytest.raises(TagError, match=f"reads like '{meant}'"):
        check_spelling(privacy_tags(tag), NEVER_LEAVE_DEVICE)
    with pytest.raises(TagError, match="was not sent anywhere"):  # gw does not resolve: the raise came first
        Client("http://gw:8000").chat.completions.create(model="m", messages=ASK, privacy=tag)


@pytest.mark.parametrize(
    "tag",
    ["public", "internal", "marketing", "pi-team", "private", "PII", "prod", "pinned", "confidence", "piiredacted",
     "nonprivate", "project", "primary", "print", "pricing"],
)  # fmt: skip
def test_other_tags_pass_the_spelling_check(tag):
    check_spelling(privacy_tags(tag), NEVER_LEAVE_DEVICE)


@pytest.mark.parametrize("tag", ["P\u0130\u0130", "P\u0130I", "PR\u0130VATE", "CONF\u0130DENT\u0130AL"])
def test_a_tag_upper_cased_in_a_turkish_locale_is_the_never_leave_tag(tag):
    """(a review) `"pii".toUpperCase()` in a Turkish locale is `Pİİ`; lower-cased, `İ` is `i` and a combining dot,
    which the SDK read as no tag of its own and sent on, and the gateway, reading the tag once more, took for `pii`:
    a private request had left the device. A tag is read until it reads the same."""
    tags = privacy_tags(tag)
    assert tags & NEVER_LEAVE_DEVICE and {normalize_tag(t) for t in tags} == tags
    _, _, reason = Client("http://gw:8000")._plan("m", ASK, False, tag, {})
    assert reason is not None and "tagged" in reason


@pytest.mark.parametrize("tag", ["ann.lee@example.com", "4111 1111 1111 1111"])
def test_private_text_passed_as_a_tag_keeps_the_request_on_the_device(tag):
    """(a review) A tag leaves in X-Tandem-Privacy, and only the body was scanned: an address passed as a tag (or in
    extra_headers) went to the gateway, which repeated it in its 400."""
    client = Client("http://gw:8000")
    assert client._plan("m", ASK, False, tag, {})[2] is not None
    assert client._plan("m", ASK, False, None, {"extra_headers": {"X-Tandem-Privacy": tag}})[2] is not None


@pytest.mark.parametrize(
    "value", ["Please mail ann.lee@example.com my card 4111 1111 1111 1111 tomorrow morning", {"to": "ann@x.com"}]
)
def test_a_refused_tag_is_not_repeated_in_the_error(value):
    """(a review) An app that logs the TagError logged the private text passed as a tag."""
    with pytest.raises(TagError) as caught:
        privacy_tags(value)
    assert "ann" not in str(caught.value)


@pytest.mark.parametrize("tag", ["inter\r\nnal", "a\nb", "x\x00"])
def test_a_tag_that_cannot_be_a_header_is_a_tag_error_before_the_network(tag):
    """(a review) It was GatewayUnavailable "failed after it had the request", where nothing had been sent."""
    with pytest.raises(TagError, match="nothing was sent"):
        Client("http://gw:8000").chat.completions.create(model="m", messages=ASK, privacy=tag)


def test_an_apps_own_tag_that_looks_like_a_private_one_is_named_in_known_tags():
    check_spelling(privacy_tags("privat"), NEVER_LEAVE_DEVICE, known=privacy_tags("Privat"))
    client = Client("http://gw:8000", known_tags=["privat"])
    _, tags, reason = client._plan("m", ASK, False, "privat", {})
    assert tags == {"privat"} and reason is None


@pytest.mark.parametrize(
    ("value", "message"),
    [(["t"] * 33, "at most 32 privacy tags"), (",".join(f"t{i}" for i in range(40)), "at most 32 privacy tags"),
     ("p" * 65, "is over 64 characters"), ("x" * 2_000_000, "at most 32 privacy tags")],
)  # fmt: skip
def test_tags_are_bounded(value, message):
    """A tag list is a few short words: a megabyte of them is refused in a bounded time, and not echoed back."""
    with pytest.raises(TagError, match=message) as caught:
        privacy_tags(value)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("url", ["http://192.168.1.5:50062", "http://agent.example.com:50062", "http://0.0.0.0:1"])
def test_a_local_agent_must_be_on_loopback(url):
    with pytest.raises(ValueError, match="not on loopback"):
        check_loopback(url)
    with pytest.raises(ValueError, match="not on loopback"):
        Client("http://gw:8000", local_agent_url=url)


def test_device_is_detected_once_and_the_app_can_override_it():
    assert detect_device() is detect_device()  # cached
    client = Client("http://gw:8000", device={"network": "metered", "npu": True})
    header = json.loads(client.device.header())
    assert header["network"] == "metered" and header["npu"] is True and header["cores"] >= 1
    with pytest.raises(ValueError, match="unknown device field"):
        Client("http://gw:8000", device={"nnpu": True})


@pytest.mark.parametrize(
    ("metadata", "misplaced"),
    [
        ({"Privacy": "pii"}, "Privacy"),
        ({"privcy": "pii"}, "privcy"),
        ({"privacy_tags": "pii"}, "privacy_tags"),
        ({"ＰＲＩＶＡＣＹ": "pii"}, "ＰＲＩＶＡＣＹ"),
        ({"user": "ann", "pii": "yes"}, "pii"),
        ({"Confidential": "true"}, "Confidential"),
        ({"label": "Private"}, "label"),  # a never-leave tag as a value
        ({"tags": ["pii"]}, "tags"),  # ... or in a list of them (its prompt reached the gateway: a review)
        ({"labels": ("public", "private")}, "labels"),
        ({"classification": ["Confidential"]}, "classification"),
        ({"privacy": "pii", "priority": "high", "private_key_id": "k1", "project": "x", "primary": "y"}, None),
        ({"piracy": "none", "team": "internal", "note": "private equity fund"}, None),
        # flags for a tag, and words that keep a request local (an adversarial review)
        ({"is_private": "true"}, "is_private"),
        ({"contains_pii": "yes"}, "contains_pii"),
        ({"pii_data": "yes"}, "pii_data"),
        ({"local_only": "true"}, "local_only"),
        ({"sensitive": "true"}, "sensitive"),
        ({"isPrivate": True}, "isPrivate"),
        ({"onDevice": "yes"}, "onDevice"),
        ({"private_key_id": "k1", "pii_handling_team": "ops", "sensitivity_model": "v2"}, None),
        # a second review: keys of the apps' own, and flags that say "no"
        ({"case_sensitive": True, "latency_sensitive": "yes", "run_on_device": True, "no_cloud_sync": True}, None),
        ({"private_mode": "on", "pii_level": "2", "confidential_level": "low"}, None),
        ({"is_private": False, "contains_pii": "no", "local_only": "false"}, None),
        ({"privacy_policy_version": "2024-01", "privacyPolicyAccepted": True, "pii": False, "private": "no"}, None),
    ],
)
def test_a_metadata_key_meant_for_privacy_tags_is_refused_before_the_network(metadata, misplaced):
    """{"Privacy": "pii"} read as any other metadata would leave the request untagged."""
    assert misplaced_privacy_key(metadata, NEVER_LEAVE_DEVICE, NEVER_LEAVE_DEVICE) == misplaced
    if misplaced is not None:
        with pytest.raises(TagError, match=f"metadata.{misplaced}: privacy tags go in metadata.privacy"):
            Client("http://gw:8000").chat.completions.create(model="m", messages=ASK, metadata=metadata)


@pytest.mark.parametrize(
    "extras",
    [{"extra_headers": {"X-Tandem-Privacy": "pii"}}, {"extra_headers": {"x-tandem-privacy": "Confidential"}},
     {"extra_body": {"metadata": {"privacy": "private"}}}, {"extra_body": {"user": "ann@example.com"}}],
)  # fmt: skip
def test_the_openai_clients_extras_are_read_before_the_privacy_decision(extras):
    """An app moved from the openai client that tags a request in extra_headers or extra_body keeps it on the
    device (no local agent here: refused, nothing sent); before, the tag went to the gateway as a body field."""
    with pytest.raises(PrivateRequestError, match="it was not sent anywhere"):
        Client("http://gw:8000", local_agent_url=None).chat.completions.create(model="m", messages=ASK, **extras)


def test_extra_body_is_merged_and_other_extra_headers_are_refused():
    client = Client("http://gw:8000")
    payload, _, reason = client._plan("m", ASK, False, None, {"extra_body": {"top_k": 5}, "extra_headers": {}})
    body = json.loads(payload)
    assert body["top_k"] == 5 and "extra_body" not in body and reason is None
    with pytest.raises(TypeError, match="only X-Tandem-Privacy"):
        client.chat.completions.create(model="m", messages=ASK, extra_headers={"OpenAI-Organization": "x"})
    with pytest.raises(TagError, match="metadata.Privacy"):
        client.chat.completions.create(model="m", messages=ASK, extra_body={"metadata": {"Privacy": "pii"}})


@pytest.mark.parametrize("never_leave", ["private", "private,pii,confidential", ("secret",)])
def test_a_never_leave_set_given_as_a_string_is_read_as_tags(never_leave):
    """`never_leave="private"` was split into letters: a request tagged private then went to the gateway."""
    client = Client("http://gw:8000", local_agent_url=None, never_leave=never_leave)
    tag = "secret" if never_leave == ("secret",) else "private"
    with pytest.raises(PrivateRequestError, match="not sent anywhere"):
        client.chat.completions.create(model="m", messages=ASK, privacy=tag)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"messages": {"role": "user", "content": "hi"}}, "messages must be a list"),
     ({"messages": "hi"}, "messages must be a list"),
     ({"messages": ASK, "metadata": {"privacy": "pii"}, "extra_body": {"metadata": {"request_id": "42"}}},
      "extra_body \\['metadata'\\]"),
     ({"messages": ASK, "extra_body": {"privacy": "private"}}, "extra_body \\['privacy'\\]")],
)  # fmt: skip
def test_shapes_that_would_drop_a_tag_or_hide_text_are_refused_before_the_network(kwargs, error):
    with pytest.raises(TypeError, match=error):
        Client("http://gw:8000").chat.completions.create(model="m", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"max_retries": -1}, "max_retries"), ({"max_retries": None}, "max_retries"),
     ({"detectors": ["emails"]}, "unknown detector"), ({"detectors": "mail"}, "unknown detector")],
)  # fmt: skip
def test_settings_are_checked_when_the_client_is_made(kwargs, error):
    with pytest.raises(ValueError, match=error):
        Client("http://gw:8000", **kwargs)
    assert Client("http://gw:8000", detectors="email")._s.detectors == ("email",)


@pytest.mark.parametrize(
    ("status", "content", "headers", "message"),
    [(200, b"<html>captive portal</html>", {"content-type": "text/html"}, "not a JSON object (text/html"),
     (200, b"", {}, "not a JSON object"), (200, b"[1, 2]", {"content-type": "application/json"}, "not a JSON object"),
     (404, b'{"error": "model not found"}', {}, '{"error": "model not found"}'),
     (500, b"null", {}, "null"), (400, b'["x"]', {}, '["x"]')],
)  # fmt: skip
def test_answers_that_are_not_the_expected_json_are_api_errors(status, content, headers, message):
    import httpx
    from tandem_sdk import APIError

    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=content, headers=headers))
    client = Client("http://gw:8000", local_agent_url=None, max_retries=0)
    client._http = httpx.Client(transport=transport)
    with pytest.raises(APIError, match=message.replace("[", "\\[").replace("(", "\\(")):
        client.chat.completions.create(model="m", messages=ASK)


@pytest.mark.parametrize(("value", "wait_s"), [("inf", 60.0), ("1e308", 60.0), ("2", 2.0), ("-3", 0.0)])
def test_retry_after_is_capped(value, wait_s):
    import httpx
    from tandem_sdk.client import _retry_delay_s

    assert _retry_delay_s(httpx.Response(503, headers={"retry-after": value}), 0) == wait_s


class _EdgeAgent(http.server.BaseHTTPRequestHandler):
    """A loopback stand-in for a local agent: answers the SDK's health probe as an edge agent; subclasses say
    what a POST gets."""

    def _reply(self, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # the health probe
        self._reply(health_answer(self.headers))

    def log_message(self, *args):
        pass


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_local_agent_that_fails_mid_answer_is_a_private_request_error():
    """A local agent that answers its health probe and then drops the request: the app gets a PrivateRequestError
    saying nothing went elsewhere, not httpx's own exception."""

    class Faulty(_EdgeAgent):
        def do_POST(self):  # the answer: the agent dies
            self.connection.close()

    server = _serve(Faulty)
    try:
        client = Client(None, local_agent_url=f"http://127.0.0.1:{server.server_port}")
        with pytest.raises(PrivateRequestError, match="failed .*it was not sent anywhere else"):
            client.chat.completions.create(model="m", messages=ASK, privacy="private")
    finally:
        server.shutdown()


def test_the_local_fallback_serves_only_what_never_reached_the_gateway():
    """A gateway that takes the request and drops it may have run it: no local re-run, a clear error. A gateway
    that refuses the connection: the local agent answers (allow_local_fallback)."""
    import socket

    from tandem_sdk import GatewayUnavailable

    posts = []

    class Agent(_EdgeAgent):
        def do_POST(self):
            posts.append(self.rfile.read(int(self.headers["Content-Length"])))
            self._reply(b'{"choices": [{"message": {"content": "local"}}]}')

    agent = _serve(Agent)
    dropper = socket.socket()
    dropper.bind(("127.0.0.1", 0))
    dropper.listen()

    def drop():
        conn, _ = dropper.accept()
        conn.recv(65536)
        conn.close()

    threading.Thread(target=drop, daemon=True).start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused_port = closed.getsockname()[1]
    closed.close()  # nothing listens there: connection refused
    local = f"http://127.0.0.1:{agent.server_port}"
    try:
        client = Client(f"http://127.0.0.1:{dropper.getsockname()[1]}", local_agent_url=local,
                        allow_local_fallback=True, max_retries=0)  # fmt: skip
        with pytest.raises(GatewayUnavailable, match="failed after it had the request"):
            client.chat.completions.create(model="m", messages=ASK)
        assert posts == []
        client = Client(f"http://127.0.0.1:{refused_port}", local_agent_url=local, allow_local_fallback=True)
        reply = client.chat.completions.create(model="m", messages=ASK)
        assert reply["tandem"]["served_by"] == "local-agent" and len(posts) == 1
    finally:
        agent.shutdown()
        dropper.close()


def _sse_server(answer: bytes, drop: bool):
    """A server on loopback that answers health probes as an edge agent and POSTs with `answer` as an event
    stream, then closes the connection mid-answer (drop) or ends it."""

    class Streamer(_EdgeAgent):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length" if drop else "Transfer-Encoding", "100000" if drop else "chunked")
            self.end_headers()
            if drop:  # promised 100,000 bytes, sends a few and dies
                self.wfile.write(answer)
            else:
                self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(answer), answer))
            self.wfile.flush()
            self.close_connection = True

    return _serve(Streamer)


CHUNK = b'data: {"choices": [{"index": 0, "delta": {"content": "Par"}}]}\n\n'


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize(
    ("answer", "drop", "private", "raised", "message"),
    [
        (CHUNK, True, False, "StreamInterrupted", "the gateway at .* failed mid-answer .*incomplete and was not re-run"),
        (CHUNK, True, True, "PrivateRequestError", "the local agent at .* failed mid-answer .*not sent anywhere else"),
        (CHUNK + b'data: {"error": {"message": "backend failed mid-answer: x", "code": "backend_failed"}}\n\n',
         False, False, "APIError", "mid-answer: backend failed mid-answer: x"),
        (CHUNK + b"data: <html>\n\n", False, False, "StreamInterrupted", r"failed mid-answer \(not JSON\)"),
    ],
    ids=["connection-dropped", "private-dropped", "error-event", "not-json"],
)  # fmt: skip
def test_a_stream_that_breaks_mid_answer_says_so_in_the_sdks_terms(answer, drop, private, raised, message, is_async):
    """The first chunk arrives; then the server fails. The app gets the chunk, then one of the SDK's errors naming
    where and what (never httpx's exception, never the error event handed over as if it were a chunk)."""
    import asyncio

    import tandem_sdk

    server = _sse_server(answer, drop)
    url = f"http://127.0.0.1:{server.server_port}"
    kwargs = {"privacy": "private"} if private else {}
    got = []
    try:
        if is_async:

            async def run():
                async with tandem_sdk.AsyncClient(url, local_agent_url=url) as client:
                    stream = await client.chat.completions.create(model="m", messages=ASK, stream=True, **kwargs)
                    async with stream:
                        async for chunk in stream:
                            got.append(chunk)

            with pytest.raises(getattr(tandem_sdk, raised), match=message) as caught:
                asyncio.run(run())
        else:
            with tandem_sdk.Client(url, local_agent_url=url) as client:
                stream = client.chat.completions.create(model="m", messages=ASK, stream=True, **kwargs)
                with pytest.raises(getattr(tandem_sdk, raised), match=message) as caught, stream:
                    got.extend(stream)
    finally:
        server.shutdown()
    assert got == [{"choices": [{"index": 0, "delta": {"content": "Par"}}]}]
    if raised == "APIError":
        assert caught.value.code == "backend_failed"


@pytest.mark.parametrize(
    ("key", "raised", "message"),
    [
        ("tk-ключ", ValueError, r"'к' \(U\+043A\) at position 3"),
        ("tk-abc\nX-Evil: 1", ValueError, r"'\\n' \(U\+000A\)"),
        ("“tk-abc”", ValueError, "pasted with a quote"),
        ("tk abc", ValueError, "no spaces"),
        (123, TypeError, "api_key must be a string"),
    ],
)
def test_an_api_key_that_cannot_be_a_header_is_refused_when_the_client_is_made(key, raised, message):
    with pytest.raises(raised, match=message):
        Client("http://gw:8000", api_key=key)


def test_a_pasted_key_loses_its_surrounding_whitespace():
    from tandem_sdk.client import _gateway_target

    client = Client("http://gw:8000", api_key="  tk-abc\n")
    assert _gateway_target(client._s, frozenset()).headers["Authorization"] == "Bearer tk-abc"


def test_a_tag_with_a_separate_accent_mark_is_the_composed_tag():
    assert privacy_tags("Donne\u0301es") == privacy_tags("données") == {"donn\u00e9es"}
    never_leave = privacy_tags("confidentiél")  # as Client(never_leave=...) reads it
    assert private_reason({"messages": ASK}, privacy_tags("CONFIDENTIE\u0301L"), never_leave=never_leave)


@pytest.mark.parametrize("is_async", [False, True])
def test_a_program_on_the_agents_port_gets_neither_the_token_nor_the_prompt(is_async):
    """An edge review: whatever listened on the local agent's port and answered `{"kind": "edge"}` was sent the
    device's token (with the probe) and then the private prompt. Now the probe carries a challenge and no token, and
    only an answer that proves the token (HMAC of the challenge) gets the request."""
    import asyncio

    from tandem_sdk import AsyncClient
    from tandem_sdk.local_token import load_or_create

    token, seen = load_or_create(), []

    class Squatter(_EdgeAgent):
        def do_GET(self):
            seen.append(str(self.headers))
            self._reply(b'{"kind": "edge", "proof": "' + b"0" * 64 + b'"}')

        def do_POST(self):
            seen.append(self.rfile.read(int(self.headers["Content-Length"])).decode())
            self._reply(b'{"choices": [{"message": {"content": "harvested"}}]}')

    server = _serve(Squatter)
    url = f"http://127.0.0.1:{server.server_port}"

    async def ask_async():
        async with AsyncClient(None, local_agent_url=url) as client:
            await client.chat.completions.create(model="m", messages=ASK, privacy="private")

    try:
        with pytest.raises(PrivateRequestError, match="cannot prove it holds this device's agent token"):
            if is_async:
                asyncio.run(ask_async())
            else:
                Client(None, local_agent_url=url).chat.completions.create(model="m", messages=ASK, privacy="private")
    finally:
        server.shutdown()
    assert seen and all(token not in s for s in seen), seen  # the probe came, without the token
    assert not any(ASK[0]["content"] in s for s in seen)  # and nothing of the prompt


_ANSWER = {"id": "c", "object": "chat.completion",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}  # fmt: skip


@contextlib.contextmanager
def _gateway(bodies: list, context: ssl.SSLContext | None = None, slow_s: float = 0.0):
    """A gateway that answers every chat completion "hi" (over TLS with `context`), recording each body; a prompt
    `slow` waits `slow_s` first. Yields its port."""

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            time.sleep(slow_s if body["messages"][0]["content"] == "slow" else 0)
            raw = json.dumps(_ANSWER).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    class Quiet(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):  # a client that timed out and left: expected here
            pass

    server = Quiet(("127.0.0.1", 0), Gateway)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def test_a_tagged_request_trusts_the_certificates_the_app_named_in_ssl_cert_file(tmp_path, monkeypatch):
    """(a review) Tagged requests go without proxies (trust_env off), and httpx then reads no SSL_CERT_FILE either:
    a gateway whose certificate the app trusts through it answered untagged requests and failed tagged ones."""
    from tests.certs import Authority

    ca = Authority(tmp_path / "ca")
    issued = ca.issue("gateway", ips=("127.0.0.1",))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(issued.cert, issued.key)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca))
    with _gateway([], context) as port:
        client = Client(f"https://127.0.0.1:{port}", local_agent_url=None)
        for privacy in (None, "internal"):
            reply = client.chat.completions.create(model="m", messages=ASK, privacy=privacy)
            assert reply["choices"][0]["message"]["content"] == "hi" and reply["tandem"]["served_by"] == "gateway"


def test_the_openai_clients_per_call_options_are_options_not_body_fields():
    """(a review) `timeout=` and `extra_query=` went into the body, where the local agent and the gateway refuse an
    unknown field: `timeout` is the call's own now, and `extra_query` is refused before anything is sent."""
    bodies: list = []
    with _gateway(bodies, slow_s=1.0) as port:
        client = Client(f"http://127.0.0.1:{port}", local_agent_url=None, max_retries=0)
        assert client.chat.completions.create(model="m", messages=ASK, timeout=5)["choices"][0]["message"]["content"]
        assert "timeout" not in bodies[-1]
        slow = [{"role": "user", "content": "slow"}]
        started = time.monotonic()
        with pytest.raises(Exception, match="(?i)timeout|timed out"):
            client.chat.completions.create(model="m", messages=slow, timeout=0.2)
        assert time.monotonic() - started < 0.9
        sent = len(bodies)
        with pytest.raises(TypeError, match="extra_query"):
            client.chat.completions.create(model="m", messages=ASK, extra_query={"a": "1"})
        with pytest.raises(TypeError, match="timeout"):
            client.chat.completions.create(model="m", messages=ASK, timeout="5s")
        assert len(bodies) == sent


@pytest.mark.parametrize("said", [{"privacy": "yes"}, {"metadata": {"privacy": "true"}}, {"privacy": ["pii", "on"]}])
def test_a_privacy_tag_that_says_yes_is_refused_before_the_network(said):
    """OpenAI's metadata values are strings, so `{"privacy": "true"}` is how many would mark a request private; it
    went to the gateway, prompt and all, to be refused there (a review). Refused on the device, naming what to say."""
    with pytest.raises(TagError, match="says yes, not which tag; the request was not sent anywhere"):
        Client("http://gw:8000").chat.completions.create(model="m", messages=ASK, **said)


@pytest.mark.parametrize(
    ("settings", "error", "said"),
    [
        ({"timeout_s": "5"}, ValueError, "timeout_s must be seconds, a positive number, not '5'"),
        ({"timeout_s": -1}, ValueError, "timeout_s must be seconds"),
        ({"timeout_s": float("nan")}, ValueError, "timeout_s must be seconds"),
        ({"timeout_s": float("inf")}, ValueError, "timeout_s must be seconds"),
        ({"timeout_s": None}, ValueError, "timeout_s must be seconds"),
        ({"timeout_s": True}, ValueError, "timeout_s must be seconds"),
        ({"gateway_url": "127.0.0.1:8000"}, ValueError, "must be an http:// or https:// URL with a host"),
        ({"gateway_url": "ftp://gw"}, ValueError, "must be an http:// or https:// URL"),
        ({"gateway_url": 8000}, TypeError, "gateway_url must be a string"),
        ({"allow_local_fallback": "no"}, TypeError, "allow_local_fallback must be True or False, not 'no'"),
        ({"device": {"npu": "yes"}}, ValueError, "device npu: True or False, not 'yes'"),
        ({"device": {"battery": 60}}, ValueError, "device battery: a number from 0 .empty. to 1 .full."),
        ({"device": {"cores": 0}}, ValueError, "device cores: a whole number from 1"),
        ({"device": {"network": "wifi\nX-Evil: 1"}}, ValueError, "device network: 1-32 characters on one line"),
        ({"device": {"providers": ["CPU Execution"]}}, ValueError, "device providers: at most 32"),
        ({"device": "npu"}, TypeError, "device must be a dict of fields"),
    ],
)
def test_a_clients_settings_are_checked_when_it_is_made(settings, error, said):
    """Each was taken, then failed on the first call in httpx's words, was refused by the gateway after the request
    had left, or did the opposite of what it said: `allow_local_fallback="no"` turned the fallback on (a review)."""
    with pytest.raises(error, match=said):
        Client(**({"gateway_url": "http://gw:8000"} | settings))


def test_good_settings_are_taken_as_given():
    client = Client("https://gw.example:8443/", timeout_s=5, allow_local_fallback=True,
                    device={"npu": True, "battery": 0.5, "network": "cellular (5G)", "providers": ["QNNExecutionProvider"]})  # fmt: skip
    assert client._s.gateway_url == "https://gw.example:8443" and client._s.timeout_s == 5.0
    assert client._s.device.providers == ("QNNExecutionProvider",) and client._s.device.battery == 0.5


def test_a_request_whose_json_would_hold_a_key_twice_is_refused_before_anything_is_sent():
    """(a review) `metadata={1: card, "1": "x"}` is written with the key "1" twice: the scan read the bytes back,
    where the last value stands, and the card went to the gateway unscanned."""
    client = Client("http://127.0.0.1:9", local_agent_url=None)
    with pytest.raises(TypeError, match="the key '1' twice .* nothing was sent"):
        client.chat.completions.create(model="m", messages=ASK, metadata={1: "4111 1111 1111 1111", "1": "x"})

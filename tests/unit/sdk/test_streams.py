"""What a streamed call gives the app when the server's answer is not a whole event stream: a proxy's page, a
stream cut short without `data: [DONE]`, an `event: error`. Each is an error the app can catch, never an empty or
short answer that looks complete. A real loopback server answers; the real clients read it."""

import asyncio
import contextlib
import http.server
import re
import threading
import time

import pytest
import tandem_sdk
from tandem_sdk import APIError, PrivateRequestError, StreamInterrupted

from tests.conftest import free_port
from tests.local_agent_stand_in import health_answer

ASK = [{"role": "user", "content": "Say hello world"}]
HELLO = b'data: {"choices": [{"index": 0, "delta": {"content": "Hello"}}]}\n\n'
WOR = b'data: {"choices": [{"index": 0, "delta": {"content": " wor"}}]}\n\n'
DONE = b"data: [DONE]\n\n"


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def _answer(status: str, content_type: str, body: bytes, framing: str = "length", extra: str = "") -> bytes:
    """A raw HTTP/1.1 answer. framing: "length" (Content-Length), "chunked" (a properly ended chunked body) or
    "close" (neither: the body ends when the server closes the connection)."""
    head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nConnection: close\r\n{extra}"
    if framing == "length":
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body
    if framing == "chunked":
        return f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + _chunked(body)
    return f"{head}\r\n".encode() + body


@pytest.fixture(scope="module")
def server():
    """A loopback server that is both gateway and local agent: it answers the health probe as an edge agent and
    each POST with the raw bytes in `server.answer` (each test sets its own), then closes the connection cleanly."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.wfile.write(_answer("200 OK", "application/json", health_answer(self.headers)))
            self.close_connection = True

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            answer = self.server.answer  # bytes, or [(bytes, then a pause in seconds), ...]: an answer in pieces
            for piece, pause in answer if isinstance(answer, list) else [(answer, 0)]:
                try:
                    self.wfile.write(piece)
                    self.wfile.flush()
                except OSError:  # the client left
                    break
                time.sleep(pause)
            self.close_connection = True

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.url = f"http://127.0.0.1:{httpd.server_port}"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _stream(url: str, private: bool, is_async: bool) -> tuple[list[str], Exception | None]:
    """The text of each chunk the app got, and what the call raised (None: it looked like a whole answer)."""
    kwargs = {"model": "m", "messages": ASK, "stream": True, "privacy": "private" if private else None}
    got: list[str] = []

    def text(chunk: dict) -> str:
        return chunk["choices"][0]["delta"]["content"]  # a chunk that is not one fails here, as in an app

    async def run_async():
        async with tandem_sdk.AsyncClient(url, local_agent_url=url, max_retries=0) as client:
            async with await client.chat.completions.create(**kwargs) as stream:
                async for chunk in stream:
                    got.append(text(chunk))

    try:
        if is_async:
            asyncio.run(run_async())
        else:
            with tandem_sdk.Client(url, local_agent_url=url, max_retries=0) as client:
                with client.chat.completions.create(**kwargs) as stream:
                    got.extend(text(chunk) for chunk in stream)
    except Exception as exc:  # noqa: BLE001 - the test looks at what the app would have caught
        return got, exc
    return got, None


BOTH = pytest.mark.parametrize(("private", "is_async"), [(False, False), (False, True), (True, False), (True, True)])


@BOTH
def test_a_whole_stream_is_every_chunk_and_no_error(server, private, is_async):
    server.answer = _answer("200 OK", "text/event-stream", HELLO + WOR + DONE, "chunked")
    assert _stream(server.url, private, is_async) == (["Hello", " wor"], None)


@BOTH
@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (_answer("200 OK", "text/html; charset=utf-8", b"<html><title>Wi-Fi login</title>" + b"x" * 500),
         r"200: the answer is not an event stream \(text/html; charset=utf-8\): '<html><title>Wi-Fi login"),
        (_answer("200 OK", "application/json", b'{"id": "cmpl-1", "choices": []}'),
         r"""200: the answer is not an event stream \(application/json\): '{"id": "cmpl-1", "choices": \[\]}'"""),
        (_answer("302 Found", "text/html", b"<a href='https://portal.example/login'>", extra="Location: /login\r\n"),
         r"302: the answer is not an event stream \(text/html, a redirect to /login\): \"<a href="),
    ],
    ids=["captive-portal-html", "json-body", "redirect"],
)  # fmt: skip
def test_an_answer_that_is_not_an_event_stream_is_an_api_error(server, answer, message, private, is_async):
    server.answer = answer
    got, error = _stream(server.url, private, is_async)
    assert got == [] and isinstance(error, APIError), error
    assert error.status in (200, 302)
    assert len(error.message) < 300  # the first 200 characters of the page, not all of it
    assert re.match(message, f"{error.status}: {error.message}"), error.message
    # (a review) a private request's: the page left out of the exception's text, which may reach a crash reporter
    shown = message.split(r"\): ")[0]
    with pytest.raises(PrivateRequestError if private else APIError, match=message if not private else shown):
        raise error
    assert (answer.split(b"\r\n\r\n", 1)[1][:12].decode() in str(error)) != private


@BOTH
def test_an_error_answer_to_a_private_request_keeps_the_agents_words_out_of_its_text(server, private, is_async):
    """(a review) The local agent's 400s quote the request (a tool's name, a schema, the prompt); raised as an
    APIError, its text reached an app's log or crash reporter: off the device. The words stay in `.message`."""
    refusal = b'{"error": {"message": "tool_choice names ann.lee@example.com, no tool", "code": "invalid_request"}}'
    server.answer = _answer("400 Bad Request", "application/json", refusal)
    got, error = _stream(server.url, private, is_async)
    assert got == [] and isinstance(error, APIError) and "ann.lee@example.com" in error.message
    assert isinstance(error, PrivateRequestError) == private
    assert ("ann.lee@example.com" in str(error)) != private and ("invalid_request" in str(error) or not private)


@BOTH
@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_a_stream_that_ends_without_done_is_interrupted_after_its_chunks(server, framing, private, is_async):
    """A proxy's idle timeout ends the body cleanly; the app still hears that the answer is cut short."""
    server.answer = _answer("200 OK", "text/event-stream", HELLO + WOR, framing)
    got, error = _stream(server.url, private, is_async)
    assert got == ["Hello", " wor"]
    assert isinstance(error, PrivateRequestError if private else StreamInterrupted), error
    assert "ended without [DONE]" in str(error)


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize(
    "event",
    [
        b'event: error\ndata: {"message": "backend died"}\n\n',
        b"event: error\ndata: backend died\n\n",
        b'data: {"error": {"message": "backend died", "code": "backend_failed"}}\n\n',  # the gateway's own form
    ],
    ids=["event-error-json", "event-error-text", "data-error"],
)
def test_an_error_sent_mid_stream_is_an_api_error_with_its_message(server, event, is_async):
    server.answer = _answer("200 OK", "text/event-stream", HELLO + event + DONE, "chunked")
    got, error = _stream(server.url, False, is_async)
    assert got == ["Hello"]
    assert isinstance(error, APIError) and "backend died" in error.message, error


def _call(
    url: str, private: bool, is_async: bool, stream: bool, timeout_s: float
) -> tuple[list[str], Exception | None, float]:
    """What the app got (each chunk's text, or the answer's), what the call raised, and how long it took."""
    kwargs = {"model": "m", "messages": ASK, "stream": stream, "privacy": "private" if private else None}
    got: list[str] = []
    settings = {"local_agent_url": url, "max_retries": 0, "timeout_s": timeout_s}

    async def run_async():
        async with tandem_sdk.AsyncClient(url, **settings) as client:
            answer = await client.chat.completions.create(**kwargs)
            if not stream:
                return got.append(answer["choices"][0]["message"]["content"])
            async with answer:
                async for chunk in answer:
                    got.append(chunk["choices"][0]["delta"]["content"])

    started = time.monotonic()
    try:
        if is_async:
            asyncio.run(run_async())
        else:
            with tandem_sdk.Client(url, **settings) as client:
                answer = client.chat.completions.create(**kwargs)
                if not stream:
                    got.append(answer["choices"][0]["message"]["content"])
                else:
                    with answer:
                        got.extend(chunk["choices"][0]["delta"]["content"] for chunk in answer)
    except Exception as exc:  # noqa: BLE001 - the test looks at what the app would have caught
        return got, exc, time.monotonic() - started
    return got, None, time.monotonic() - started


ANSWER = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello"}, "finish_reason": "stop"}]}'


@BOTH
def test_an_answer_sent_a_byte_at_a_time_fails_within_the_timeout(server, private, is_async):
    """httpx's timeout bounds each read: a server that sent its answer a byte every 50 ms held a call with a 0.5 s
    timeout for 5 s (minutes, for a longer answer; a review). The answer must be whole within the timeout."""
    whole = _answer("200 OK", "application/json", ANSWER)
    head, body = whole.split(b"\r\n\r\n", 1)
    server.answer = [(head + b"\r\n\r\n", 0)] + [(body[i : i + 1], 0.05) for i in range(len(body))]
    got, error, took = _call(server.url, private, is_async, stream=False, timeout_s=0.5)
    assert got == [] and isinstance(error, PrivateRequestError if private else tandem_sdk.GatewayUnavailable), error
    assert "did not arrive whole within 0.5 s" in str(error) and took < 2.5, (str(error), took)


@BOTH
def test_a_stream_of_keep_alives_alone_fails_within_the_timeout(server, private, is_async):
    """A stream that sent only comments after its first chunk was read for ever, each comment within httpx's
    timeout (a review); the time between events is what the timeout bounds now."""
    keep_alives = [(b": keep-alive\r\n\r\n", 0.1)] * 60
    head = _answer("200 OK", "text/event-stream", b"", "close")
    server.answer = [(head + HELLO, 0), *keep_alives, (DONE, 0)]
    got, error, took = _call(server.url, private, is_async, stream=True, timeout_s=0.5)
    assert got == ["Hello"] and isinstance(error, PrivateRequestError if private else StreamInterrupted), error
    assert "no event came within 0.5 s" in str(error) and took < 2.5, (str(error), took)


@BOTH
def test_a_slow_stream_within_the_timeout_and_line_breaks_cut_between_reads_are_whole(server, private, is_async):
    """Events 0.2 s apart under a 0.5 s timeout are a whole answer, and a CR LF cut between two reads is one line
    break (two would end an event early)."""
    multi = b'data: {"choices": [{"index": 0,\r\ndata:  "delta": {"content": "Hello"}}]}\r\n\r\n'
    cut = multi.index(b"\r\ndata:  ") + 1
    head = _answer("200 OK", "text/event-stream", b"", "close")
    server.answer = [(head, 0), (multi[:cut], 0.2), (multi[cut:], 0.2), (WOR.replace(b"\n", b"\r\n"), 0.2), (DONE, 0)]
    assert _call(server.url, private, is_async, stream=True, timeout_s=0.5)[:2] == (["Hello", " wor"], None)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_retry_sends_the_bytes_that_were_scanned_whatever_the_app_changes_meanwhile(kind):
    """(a review) Each retry serialized the app's own message list again: a message another task or thread added
    while the SDK waited out a 503 went to the gateway unscanned, a card number in a public request. The request's
    bytes are made and scanned once."""
    bodies = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            if len(bodies) == 1:
                answer = _answer("503 Service Unavailable", "application/json", b'{"error": {"message": "busy"}}',
                                 extra="Retry-After: 0.5\r\n")  # fmt: skip
            else:
                answer = _answer("200 OK", "application/json", b'{"choices": [{"message": {"content": "hi"}}]}')
            self.wfile.write(answer)
            self.close_connection = True

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    history = [{"role": "user", "content": "hello"}]
    secret = {"role": "user", "content": "my card is 4111 1111 1111 1111"}
    try:
        if kind == "sync":
            timer = threading.Timer(0.2, lambda: (history.append(secret), history[0].update(content="ann@example.com")))
            timer.start()
            with tandem_sdk.Client(url, local_agent_url=None, max_retries=2) as client:
                reply = client.chat.completions.create(model="m", messages=history)
            timer.join()
        else:

            async def run():
                async def meanwhile():
                    await asyncio.sleep(0.2)
                    history.append(secret)
                    history[0]["content"] = "ann@example.com"

                async with tandem_sdk.AsyncClient(url, local_agent_url=None, max_retries=2) as client:
                    typing = asyncio.create_task(meanwhile())
                    answer = await client.chat.completions.create(model="m", messages=history)
                    await typing
                    return answer

            reply = asyncio.run(run())
    finally:
        server.shutdown()
    assert len(bodies) == 2 and bodies[0] == bodies[1] and b"4111" not in bodies[1] and b"ann@" not in bodies[1]
    assert len(history) == 2  # the app did change its list during the wait
    assert reply["tandem"]["served_by"] == "gateway"
    with pytest.raises(PrivateRequestError):  # what it holds now is private: never sent to the gateway
        tandem_sdk.Client(url, local_agent_url=None).chat.completions.create(model="m", messages=history)


@BOTH
def test_a_byte_order_mark_before_the_stream_loses_no_event(server, private, is_async):
    """(a review) The SSE format drops a leading BOM; read as part of the first line it hid the first event."""
    server.answer = _answer("200 OK", "text/event-stream", "\ufeff".encode() + HELLO + WOR + DONE, "chunked")
    assert _stream(server.url, private, is_async) == (["Hello", " wor"], None)


@BOTH
def test_json_nested_past_the_parsers_depth_is_an_error_the_sdk_names(server, private, is_async):
    """(a review) A RecursionError escaped every handler, for a stream's event and for a whole answer."""
    server.answer = _answer("200 OK", "text/event-stream", HELLO + b"data: " + b"[" * 100_000 + b"\n\n" + DONE)
    got, error = _stream(server.url, private, is_async)
    assert got == ["Hello"] and isinstance(error, PrivateRequestError if private else StreamInterrupted), error
    server.answer = _answer("200 OK", "application/json", b"[" * 100_000)
    with tandem_sdk.Client(server.url, local_agent_url=server.url, max_retries=0) as client:
        with pytest.raises(PrivateRequestError if private else APIError, match="not a JSON object"):
            client.chat.completions.create(model="m", messages=ASK, privacy="private" if private else None)


def test_a_redirect_with_a_json_body_is_no_completion(server):
    """(a review) A 307 whose body was JSON came back as the completion."""
    server.answer = _answer("307 Temporary Redirect", "application/json", b'{"moved": true}',
                            extra="Location: https://elsewhere.example/v1\r\n")  # fmt: skip
    with tandem_sdk.Client(server.url, local_agent_url=None, max_retries=0) as client:
        with pytest.raises(APIError, match="307: .*a redirect to https://elsewhere.example/v1"):
            client.chat.completions.create(model="m", messages=ASK)


@pytest.mark.parametrize("is_async", [False, True])
def test_a_stream_closed_by_the_app_ends_and_is_read_once_and_a_closed_client_says_so(server, is_async):
    """(a review) close() inside the loop, as the docs present cancelling, raised StreamInterrupted blaming the
    gateway; a second loop raised httpx's StreamConsumed; a call on a closed client httpx's RuntimeError."""
    pieces = [(HELLO, 0.05), (WOR, 0.05), (WOR, 0.05), (DONE, 0)]
    server.answer = [(_answer("200 OK", "text/event-stream", b"", "close"), 0), *pieces]
    kwargs = {"model": "m", "messages": ASK, "stream": True}

    async def run_async():
        client = tandem_sdk.AsyncClient(server.url, local_agent_url=None, max_retries=0)
        stream = await client.chat.completions.create(**kwargs)
        got = []
        async for chunk in stream:
            got.append(chunk)
            await stream.aclose()
        with pytest.raises(tandem_sdk.TandemError, match="read once"):
            async for _ in stream:
                pass
        await client.aclose()
        with pytest.raises(tandem_sdk.TandemError, match="client is closed"):
            await client.chat.completions.create(**kwargs)
        return got

    if is_async:
        got = asyncio.run(run_async())
    else:
        client = tandem_sdk.Client(server.url, local_agent_url=None, max_retries=0)
        stream = client.chat.completions.create(**kwargs)
        got = []
        for chunk in stream:
            got.append(chunk)
            stream.close()
        with pytest.raises(tandem_sdk.TandemError, match="read once"):
            list(stream)
        client.close()
        with pytest.raises(tandem_sdk.TandemError, match="client is closed"):
            client.chat.completions.create(**kwargs)
    assert len(got) == 1


@pytest.mark.parametrize("is_async", [False, True])
def test_a_local_fallback_that_fails_too_is_the_sdks_error(server, is_async):
    """(a review) With allow_local_fallback, the gateway refusing connections and the local agent dropping the
    request, httpx's RemoteProtocolError reached the app past its `except TandemError`."""
    server.answer = b""  # the agent closes the connection without an answer
    gone = f"http://127.0.0.1:{free_port()}"
    settings = {"local_agent_url": server.url, "max_retries": 0, "allow_local_fallback": True}

    async def run_async():
        async with tandem_sdk.AsyncClient(gone, **settings) as client:
            await client.chat.completions.create(model="m", messages=ASK)

    with pytest.raises(tandem_sdk.GatewayUnavailable, match="the local fallback at .* failed too"):
        if is_async:
            asyncio.run(run_async())
        else:
            with tandem_sdk.Client(gone, **settings) as client:
                client.chat.completions.create(model="m", messages=ASK)


@pytest.mark.parametrize("how", ["endless", "deep", "trickled-headers"])
@pytest.mark.parametrize("is_async", [False, True])
def test_the_local_agents_probe_reads_a_few_kilobytes_within_its_timeout(is_async, how):
    """(a review) The health probe, asked before every private call, read an endless answer whole (600 MB) and a
    trickled one for as long as it came: what answers on the agent's port may be another program."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop = threading.Event()

    def endless():
        while not stop.is_set():
            listener.settimeout(0.2)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                with contextlib.suppress(OSError):
                    if how == "endless":
                        conn.sendall(
                            b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"kind": "edge", "x": "'
                        )
                        while not stop.is_set():
                            conn.sendall(b"a" * 65536)
                    elif how == "deep":  # (nested past the parser's depth: a RecursionError escaped)
                        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n" + b"[" * 3000)
                    else:  # headers a byte every 0.1 s: the sync client waited for as long as they came
                        for byte in b"HTTP/1.1 200 OK\r\nX-Padding: " + b"x" * 200:
                            if stop.is_set():
                                break
                            conn.sendall(bytes([byte]))
                            time.sleep(0.1)

    thread = threading.Thread(target=endless, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        if is_async:

            async def probe():
                async with tandem_sdk.AsyncClient(None, local_agent_url=url) as client:
                    return await client.local_agent()

            health = asyncio.run(probe())
        else:
            with tandem_sdk.Client(None, local_agent_url=url) as client:
                health = client.local_agent()
    finally:
        stop.set()
        thread.join(5)
        listener.close()
    assert health is None and time.monotonic() - started < 3


@pytest.mark.parametrize("is_async", [False, True])
def test_a_page_or_headers_sent_a_byte_at_a_time_are_held_to_the_timeout(server, is_async):
    """(a review) With timeout_s=1, a captive portal's page trickled a byte every 0.3 s held a streamed call for a
    minute (each read within httpx's timeout), and headers trickled so held an async call for as long as they
    came. The page is shown as far as it came within the timeout; the async client's headers are held to it too."""
    page = _answer("200 OK", "text/html", b"<html>" + b"x" * 400)
    head, body = page.split(b"\r\n\r\n", 1)
    server.answer = [(head + b"\r\n\r\n", 0), *((bytes([b]), 0.3) for b in body[:40])]
    kwargs = {"model": "m", "messages": ASK, "stream": True}

    async def run_async():
        async with tandem_sdk.AsyncClient(server.url, local_agent_url=None, max_retries=0, timeout_s=1) as client:
            await client.chat.completions.create(**kwargs)

    started = time.monotonic()
    with pytest.raises(APIError, match="not an event stream"):
        if is_async:
            asyncio.run(run_async())
        else:
            with tandem_sdk.Client(server.url, local_agent_url=None, max_retries=0, timeout_s=1) as client:
                client.chat.completions.create(**kwargs)
    assert time.monotonic() - started < 4
    if is_async:
        server.answer = [(bytes([b]), 0.3) for b in head[:40]]
        started = time.monotonic()
        with pytest.raises(tandem_sdk.GatewayUnavailable, match="no answer came within 1 s"):
            asyncio.run(run_async())
        assert time.monotonic() - started < 4

"""An OpenAI-compatible upstream that answers badly (a real HTTP server here): the backend's fault, counted against
it and tried elsewhere; never a 500 of the gateway's, never the caller's fault, never held whole in memory."""

import asyncio
import http.server
import threading

import grpc
import pytest

from gateway.backends.http_backend import MAX_LINE_CHARS, HttpWorkerBackend
from gateway.backends.worker_backend import BackendError
from proto.gen import worker_pb2

DONE = "data: [DONE]\n\n"
ANSWERS = {  # path -> (status, body)
    "scalar": (200, "data: 5\n\n" + DONE),
    "choices_null": (200, 'data: {"choices": null, "usage": null}\n\n' + DONE),
    "choice_str": (200, 'data: {"choices": ["x"]}\n\n' + DONE),
    "text_int": (200, 'data: {"choices": [{"text": 5, "finish_reason": "stop"}]}\n\n' + DONE),
    "usage_negative": (
        200,
        'data: {"choices": [{"text": "x", "finish_reason": "stop"}], '
        '"usage": {"prompt_tokens": -3, "completion_tokens": 1}}\n\n' + DONE,
    ),  # fmt: skip
    "usage_huge": (
        200,
        'data: {"choices": [{"text": "x", "finish_reason": "stop"}], '
        '"usage": {"prompt_tokens": 1099511627776, "completion_tokens": 1}}\n\n' + DONE,
    ),  # fmt: skip
    "long_line": (200, "data: " + "x" * (MAX_LINE_CHARS + 10) + "\n\n" + DONE),
    "too_much_text": (200, 'data: {"choices": [{"text": "' + "x" * 5000 + '", "finish_reason": "stop"}]}\n\n' + DONE),
    "redirect": (302, "moved"),
    "wrong_key": (401, '{"error": {"message": "invalid api key for upstream internal-vllm-7"}}'),
    "huge_error": (500, "e" * (8 << 20)),
}


class BadServer:
    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                status, body = ANSWERS[self.path.strip("/").split("/")[0]]
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream" if status == 200 else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def server():
    s = BadServer()
    yield s
    s.server.shutdown()


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_a_bad_answer_is_the_backends_fault_and_opens_its_breaker(server, answer):
    async def go():
        backend = HttpWorkerBackend(f"{server.url}/{answer}", "m", "cloud")
        request = worker_pb2.GenerateRequest(
            prompt_token_ids=[1, 2, 3], sampling=worker_pb2.SamplingParams(max_tokens=4)
        )
        try:
            with pytest.raises(BackendError) as failed:
                async for _ in backend.generate(request, 5.0):
                    pass
            return failed.value, backend.breaker.consecutive_failures
        finally:
            await backend.close()

    error, failures = asyncio.run(go())
    assert error.is_retryable and not error.is_request_fault, error
    assert failures == 1
    assert "internal-vllm-7" not in error.told("cloud/0")  # the caller learns the status, not the upstream's words
    assert len(error.details) < 3000
    assert error.code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE)


BAD_CHUNKS = {
    "usage below 0": worker_pb2.GenerateChunk(
        token_ids=[1], text="x", finish_reason="stop", usage=worker_pb2.Usage(prompt_tokens=-3)
    ),  # fmt: skip
    "logprobs not one a token": worker_pb2.GenerateChunk(token_ids=[1, 2], text="xy", logprobs=[-0.1]),
    "NaN": worker_pb2.GenerateChunk(token_ids=[1], text="x", logprobs=[float("nan")]),
    "token id below 0": worker_pb2.GenerateChunk(token_ids=[-5], text="x"),
}


@pytest.mark.parametrize("bad", sorted(BAD_CHUNKS))
def test_a_workers_chunk_no_answer_can_carry_is_its_fault(bad):
    """A negative usage made a Prometheus counter raise (a 500 on every request the worker served); logprobs not
    one a token or NaN broke the answer's formatting: each a 500 of the gateway's, the worker never blamed."""
    from tests.scripted_backend import ScriptedBackend

    class Bad(ScriptedBackend):
        behaviour, reported_kind, wire_log = {}, {}, []

        async def _stream(self, request, timeout_s):
            yield BAD_CHUNKS[bad]

    async def go():
        backend = Bad("grpc://w:1", "m", "cloud")
        with pytest.raises(BackendError) as failed:
            async for _ in backend.generate(worker_pb2.GenerateRequest(), 5.0):
                pass
        return failed.value, backend.breaker.consecutive_failures

    error, failures = asyncio.run(go())
    assert error.is_retryable and failures == 1 and "a malformed answer" in error.details


def test_nothing_after_a_workers_finish_reaches_the_caller():
    from tests.scripted_backend import ScriptedBackend

    class After(ScriptedBackend):
        behaviour, reported_kind, wire_log = {}, {}, []

        async def _stream(self, request, timeout_s):
            yield worker_pb2.GenerateChunk(token_ids=[1], text="hi", finish_reason="stop")
            yield worker_pb2.GenerateChunk(token_ids=[2], text="MORE", finish_reason="length")

    async def go():
        return [c.text async for c in After("grpc://w:1", "m", "cloud").generate(worker_pb2.GenerateRequest(), 5.0)]

    assert asyncio.run(go()) == ["hi"]

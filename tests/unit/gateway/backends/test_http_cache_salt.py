"""An HTTP pool that takes a cache salt (vLLM's `cache_salt`) gets each tenant's, on the wire; others get none."""

import asyncio
import http.server
import json
import threading

import pytest

from gateway.backends.http_backend import HttpWorkerBackend
from proto.gen import worker_pb2


class CapturingServer:
    """An OpenAI-compatible /v1/completions that records each request body and streams one token."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        bodies = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                events = [
                    {"choices": [{"index": 0, "text": "x", "finish_reason": "length"}]},
                    {
                        "choices": [],
                        "usage": {
                            "prompt_tokens": 3,
                            "completion_tokens": 1,
                            "prompt_tokens_details": {"cached_tokens": 2},
                        },
                    },
                ]
                payload = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload.encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.mark.parametrize(("send_cache_salt", "expected"), [(True, "5a1t"), (False, None)])
def test_the_tenants_cache_salt_goes_only_where_the_pool_says(send_cache_salt, expected):
    """And the pool says whether its cache is every tenant's (its cached count then not shown to callers)."""
    server = CapturingServer()

    async def go():
        backend = HttpWorkerBackend(server.url, "m", "cloud", send_cache_salt=send_cache_salt)
        request = worker_pb2.GenerateRequest(
            tenant="acme",
            cache_salt="5a1t",
            prompt_token_ids=[1, 2, 3],
            sampling=worker_pb2.SamplingParams(max_tokens=1),
        )
        chunks = [c async for c in backend.generate(request, 5.0)]
        await backend.close()
        return chunks

    try:
        chunks = asyncio.run(go())
    finally:
        server.close()
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].usage.cached_prompt_tokens == 2  # the server's, for the operator's metrics
    assert HttpWorkerBackend(server.url, "m", "cloud", send_cache_salt=send_cache_salt).tenants_share_its_cache is (
        not send_cache_salt
    )
    assert server.bodies[0].get("cache_salt") == expected
    assert "acme" not in json.dumps(server.bodies[0])  # the tenant's name never travels

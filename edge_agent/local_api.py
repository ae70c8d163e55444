"""The local agent protocol: what the SDK on this device talks to for private prompts.

Loopback only (the agent refuses any other bind address for it): a private
prompt reaches this process without ever leaving the device. Two routes:
- `GET /v1/local/health`: `{"kind": "edge", "model", "execution_provider", "max_context_tokens"}`;
- `POST /v1/chat/completions`: OpenAI's request and response shapes, whole or
  streamed (SSE), answered by this agent's own engine.
docs/sdk.md is the full protocol.
"""

import itertools
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from gateway.api.openai_format import SSE_DONE, ResponseShape
from gateway.chat_tokenizer import ChatTokenizer
from gateway.errors import BadRequest
from tandem.engine_api import Engine, GenerationRequest, RequestRejected, SamplingParams

LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}
DEFAULT_MAX_TOKENS = 128


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": None}}, status)


def _request(body: dict, prompt_ids: list[int], counter) -> GenerationRequest:
    stop = body.get("stop")
    return GenerationRequest(
        request_id=f"local-{next(counter)}",
        prompt_token_ids=tuple(prompt_ids),
        sampling=SamplingParams(
            temperature=float(1.0 if body.get("temperature") is None else body["temperature"]),
            top_p=float(body.get("top_p") or 1.0),
            seed=body.get("seed"),
            max_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS),
            stop_strings=tuple([stop] if isinstance(stop, str) else stop or ()),
        ),
        private=True,
    )


def local_app(engine: Engine, chat: ChatTokenizer, model_id: str) -> FastAPI:
    app = FastAPI(title="Tandem local agent", docs_url=None, redoc_url=None)
    counter = itertools.count()

    @app.get("/v1/local/health")
    async def health() -> dict:
        stats = engine.stats()
        return {
            "kind": engine.kind,
            "model": model_id,
            "execution_provider": engine.execution_provider,
            "max_context_tokens": stats.max_context_tokens,
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            body = await request.json()
            messages = body["messages"]
            prompt_ids = chat.encode_chat(messages)
            gen = _request(body, prompt_ids, counter)
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"bad request: {exc}")
        except (BadRequest, RequestRejected) as exc:
            return _error(400, getattr(exc, "message", str(exc)))
        shape = ResponseShape.new(True, f"chatcmpl-local-{uuid.uuid4().hex[:12]}", model_id)
        stream = engine.generate(gen)
        if body.get("stream"):
            return StreamingResponse(_sse(shape, stream), media_type="text/event-stream")
        text, last = "", None
        try:
            async for chunk in stream:
                text += chunk.text
                last = chunk
        except RequestRejected as exc:
            return _error(400, str(exc))
        return shape.whole(text, last.finish_reason, last.usage)

    return app


async def _sse(shape: ResponseShape, stream):
    yield shape.chunk(None, first=True)
    try:
        async for chunk in stream:
            if chunk.text:
                yield shape.chunk(chunk.text)
            if chunk.finish_reason is not None:
                yield shape.chunk(None, chunk.finish_reason)
                yield shape.usage_chunk(chunk.usage)
    finally:
        await stream.aclose()
    yield SSE_DONE

"""The local agent protocol: what the SDK on this device talks to for private prompts.

Loopback only (the agent refuses any other bind address for it): a private
prompt reaches this process without ever leaving the device. A web page the
user visits can reach loopback too, so every request must also:
- name a loopback `Host` (127.0.0.1, localhost or [::1], any port): a DNS
  rebinding page sends its own host name (403);
- carry no `Origin` header: browsers add one to cross-site requests, the SDK
  never sends one (403);
- be `application/json` when it has a body: a page cannot send that without
  a CORS preflight, which this app never answers (415);
- carry the per-device token (`Authorization: Bearer <token>`) that the agent
  writes to a file only its user can read (tandem_sdk.local_token; 401).
Two routes:
- `GET /v1/local/health`: `{"kind": "edge", "model", "execution_provider", "max_context_tokens"}`;
- `POST /v1/chat/completions`: OpenAI's request and response shapes, whole or
  streamed (SSE), answered by this agent's own engine.
docs/sdk.md is the full protocol.
"""

import asyncio
import hmac
import itertools
import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from tandem_sdk.local_token import load_or_create

from gateway.api import tools
from gateway.api.openai_format import SSE_DONE, Logprobs, ResponseShape, sse
from gateway.api.prepare import answer_grammar, check_token_ids, tool_plan
from gateway.api.schemas import ChatCompletionRequest
from gateway.body_limit import BodyLimit
from gateway.chat_tokenizer import ChatTokenizer
from gateway.errors import BadRequest, GatewayError, PromptTooLong
from tandem.checkpoint import GenerationDefaults
from tandem.engine_api import Engine, GenerationRequest, RequestRejected, SamplingParams
from tandem.worker_service import chunk_to_proto

log = logging.getLogger(__name__)
LOOPBACK_HOSTS = {"127.0.0.1", "[::1]", "localhost"}
DEFAULT_MAX_TOKENS = 128
MAX_BODY_BYTES = 2 * 1024 * 1024


def _error(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    error_type = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": error_type, "param": param, "code": code}}, status)


def _host_name(host_header: str) -> str:
    """`127.0.0.1:50062` -> 127.0.0.1, `[::1]:50062` -> [::1]."""
    if host_header.startswith("["):
        return host_header[: host_header.find("]") + 1]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _refusal(request: Request, token: str) -> JSONResponse | None:
    """Why this request may not use the agent, as the response to send; None when it may."""
    if _host_name(request.headers.get("host", "").lower()) not in LOOPBACK_HOSTS:
        return _error(403, "the local agent answers only Host 127.0.0.1, localhost or [::1]", "forbidden_host")
    if "origin" in request.headers:
        return _error(403, "the local agent refuses browser requests (an Origin header)", "forbidden_origin")
    if request.method == "POST" and request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return _error(415, "the local agent takes Content-Type: application/json", "unsupported_media_type")
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), token.encode()):
        return _error(401, "the local agent needs 'Authorization: Bearer <token>' from its token file", "invalid_token")
    return None


def _request(
    body: ChatCompletionRequest, prompt_ids: list[int], counter, grammar: str, defaults: GenerationDefaults
) -> GenerationRequest:
    """The gateway's request model, so a field means the same on the device as in the cloud."""
    return GenerationRequest(
        request_id=f"local-{next(counter)}",
        prompt_token_ids=tuple(prompt_ids),
        sampling=SamplingParams(
            **body.sampling(defaults),
            seed=body.seed,
            max_tokens=body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS,
            stop_strings=body.stop_strings(),
            stop_token_ids=tuple(body.stop_token_ids or ()),
            ignore_eos=body.ignore_eos,
            presence_penalty=body.presence_penalty,
            frequency_penalty=body.frequency_penalty,
            logit_bias=tuple(sorted(body.token_biases().items())),
            top_logprobs=body.wanted_top_logprobs(),
            grammar=grammar,  # response_format's (checked by _parse) or a forced tool call's (by tool_plan)
        ),
        private=True,
    )


def _parse(raw: object) -> ChatCompletionRequest:
    """The body as the gateway's model reads it; BadRequest naming the first field at fault."""
    try:
        body = ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        raise BadRequest(f"{param or 'body'}: {first['msg']}", param=param) from None
    if refused := body.refused_field():
        raise BadRequest(refused[1], param=refused[0])
    if body.n != 1:
        raise BadRequest("the local agent answers one choice (n = 1)", param="n")
    try:
        body.grammar()
    except ValueError as exc:
        raise BadRequest(f"response_format: {exc}", param="response_format") from None
    return body


def local_app(engine: Engine, chat: ChatTokenizer, model_id: str, token: str | None = None) -> FastAPI:
    """The app; `token` defaults to the device's token file (written, mode 0600, if there is none)."""
    app = FastAPI(title="Tandem local agent", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES, setting="the local agent's limit")
    token = token or load_or_create()
    counter = itertools.count()

    @app.middleware("http")
    async def guard(request: Request, call_next):
        return _refusal(request, token) or await call_next(request)

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
            body = _parse(await request.json())
            check_token_ids(body, chat.tokenizer.get_vocab_size())
            plan = tool_plan(body, chat)
            grammar = await asyncio.to_thread(answer_grammar, body, plan, chat)
            messages = [m.for_template() for m in body.messages]
            prompt_ids = await asyncio.to_thread(chat.encode_chat, messages, body.tools or None)
            gen = _request(body, prompt_ids, counter, grammar, chat.generation_defaults)
            context = engine.stats().max_context_tokens
            if len(prompt_ids) + gen.sampling.max_tokens > context:
                raise PromptTooLong.of(context, len(prompt_ids), gen.sampling.max_tokens, "messages")
        except GatewayError as exc:  # BadRequest, PromptTooLong: the gateway's own answer
            return JSONResponse(exc.body(), exc.status_code)
        except RequestRejected as exc:
            return _error(400, str(exc))
        except (ValueError, RecursionError) as exc:  # JSON that does not parse, a content part that is not text
            return _error(400, f"bad request: {str(exc)[:200]}")
        shape = ResponseShape.new(True, f"chatcmpl-local-{uuid.uuid4().hex[:12]}", model_id)
        logprobs = None
        if body.wanted_top_logprobs() is not None:
            logprobs = Logprobs(True, chat.tokenizer.decode, chat.token_bytes)
        stream = _as_worker_chunks(engine.generate(gen))
        held = plan.streamed() if plan else None
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            events = _sse(shape, stream, logprobs, held, include_usage)
            return StreamingResponse(events, media_type="text/event-stream")
        text, last = "", None
        try:
            async for chunk in stream:
                text += chunk.text
                if logprobs is not None:
                    logprobs.of(chunk)
                last = chunk
        except RequestRejected as exc:
            return _error(400, str(exc))
        except Exception:  # noqa: BLE001 - never a bare stack trace to the client
            log.exception("the local agent failed")
            return _error(500, "the local agent failed; see its log", "server_error")
        calls = []
        if plan is not None:
            text, calls = plan.parse(text)
        return shape.whole(text, last.finish_reason, last.usage, logprobs.whole() if logprobs else None, calls)

    return app


async def _as_worker_chunks(stream):
    """The engine's chunks as a worker sends them (tandem.worker_service.chunk_to_proto), so the answer is formatted
    by the same code as the gateway's; closing this closes the engine's stream, which frees the request."""
    try:
        async for chunk in stream:
            yield chunk_to_proto(chunk)
    finally:
        await stream.aclose()


async def _sse(
    shape: ResponseShape, stream, logprobs: Logprobs | None, held: tools.StreamedCalls | None, include_usage: bool
):
    """The answer as server-sent events; a failure after the headers is an error event, then [DONE], never a cut."""
    yield shape.chunk(None, first=True)
    try:
        async for chunk in stream:
            these = logprobs.of(chunk) if logprobs is not None else None
            text = held.push(chunk.text) if held is not None else chunk.text
            if text or these:
                yield shape.chunk(text, logprobs=these)
            if chunk.finish_reason:
                for event in shape.ending(chunk.finish_reason, held):
                    yield event
                if include_usage:
                    yield shape.usage_chunk(chunk.usage)
    except RequestRejected as exc:
        yield sse(_error_body("invalid_request_error", str(exc)))
    except Exception:  # noqa: BLE001 - headers are sent: the client hears of it
        log.exception("the local agent's stream failed")
        yield sse(_error_body("server_error", "the local agent failed mid-answer; see its log"))
    finally:
        await stream.aclose()
    yield SSE_DONE


def _error_body(error_type: str, message: str) -> dict:
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}

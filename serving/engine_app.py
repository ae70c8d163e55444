"""OpenAI's chat completions served straight from one engine, without the gateway: the local agent's API on a
device (edge_agent/local_api.py adds its guards) and, opened by `--serve-openai`, a cloud worker's for an
inference gateway in front of it (an llm-d / Gateway API InferencePool, docs/operations.md).

The request and response models, the tool and grammar handling and the answer's formatting are the gateway's
own, so a field means the same here as there. One choice per request (n = 1).
"""

import asyncio
import itertools
import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from serving.checkpoint import GenerationDefaults
from serving.client_leaves import client_gone, unless_the_client_leaves
from serving.engine_api import Engine, GenerationRequest, RequestRejected, SamplingParams
from serving.grammar import refused
from serving.openai.answer import (
    ToolPlan,
    answer_grammar,
    answer_logprobs,
    check_token_ids,
    max_tokens_within,
    stops_for,
    tool_plan,
)
from serving.openai.chat_tokenizer import ChatTokenizer
from serving.openai.errors import (
    UNDECODABLE_BODY,
    BadRequest,
    GatewayError,
    ModelNotFound,
    framework_refusal,
    refusal,
)
from serving.openai.format import SSE_DONE, Logprobs, ResponseShape, sse
from serving.openai.schemas import ChatCompletionRequest
from serving.worker_service import chunk_to_proto

log = logging.getLogger(__name__)
DEFAULT_MAX_TOKENS = 128


def error_response(status: int, message: str, code: str | None = None, param: str | None = None) -> JSONResponse:
    return JSONResponse(_error_body(status, message, code, param), status)


def _rejected(exc: RequestRejected, plan: ToolPlan | None = None) -> tuple[str, str, str | None]:
    """A request the engine refused, as the gateway says it (message, code, param): a grammar that failed mid-answer
    names `response_format` or `tools` (a review: the local agent's said no param and no code)."""
    message, param = refused(str(exc), bool(plan is not None and plan.grammar))
    return message, "invalid_request", param


def _request(
    body: ChatCompletionRequest,
    prompt_ids: list[int],
    most: int,
    counter,
    plan: ToolPlan | None,
    grammar: str,
    defaults: GenerationDefaults,
    private: bool,
) -> GenerationRequest:
    """The gateway's request model, so a field means the same on the device as in the cloud."""
    stop_strings, stop_token_ids = stops_for(body, plan)
    return GenerationRequest(
        request_id=f"http-{next(counter)}",
        prompt_token_ids=tuple(prompt_ids),
        sampling=SamplingParams(
            **body.sampling(defaults),
            seed=body.seed,
            max_tokens=most,
            stop_strings=stop_strings,
            stop_token_ids=stop_token_ids,
            ignore_eos=body.ignore_eos,
            presence_penalty=body.presence_penalty,
            frequency_penalty=body.frequency_penalty,
            logit_bias=tuple(sorted(body.token_biases().items())),
            top_logprobs=body.wanted_top_logprobs(),
            grammar=grammar,  # response_format's (checked by _parse) or a forced tool call's (by tool_plan)
        ),
        private=private,
    )


def _parse(raw: object) -> ChatCompletionRequest:
    """The body as the gateway's model reads it; BadRequest naming the first field at fault."""
    try:
        body = ChatCompletionRequest.model_validate(raw)
    except ValidationError as exc:  # in the gateway's words (no validator's repr with a memory address)
        raise refusal(exc.errors()) from None
    if refused := body.refused_field():
        raise BadRequest(refused[1], param=refused[0])
    if body.n != 1:
        raise BadRequest("this server answers one choice (n = 1); the gateway answers more", param="n")
    try:
        body.grammar()
    except ValueError as exc:
        raise BadRequest(f"response_format: {exc}", param="response_format") from None
    return body


def add_openai_routes(
    app: FastAPI, engine: Engine, chat: ChatTokenizer, model_id: str, private: bool, require_model: bool = False
) -> None:
    """POST /v1/chat/completions and GET /v1/models on `app`, answered by `engine`. `private`: what the requests
    are (True on the device; a cloud worker refuses private requests, so False there). `require_model`: a request
    naming another model is a 404 (an inference gateway in front names the model; the device's SDK may not)."""
    counter = itertools.count()

    app.add_exception_handler(StarletteHTTPException, _http_error)

    @app.get("/v1/models")
    async def models() -> dict:
        context = engine.stats().max_context_tokens
        card = {"id": model_id, "object": "model", "owned_by": "tandem", "context_length": context}
        return {"object": "list", "data": [card | {"max_model_len": context}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            try:
                raw = await request.json()
            except (ValueError, RecursionError):
                raise BadRequest(UNDECODABLE_BODY) from None
            body = _parse(raw)
            if require_model and body.model != model_id:
                raise ModelNotFound(
                    f"model {body.model!r} does not exist; this worker serves {model_id!r}", param="model"
                )
            check_token_ids(body, chat.tokenizer.get_vocab_size())
            plan = await asyncio.to_thread(tool_plan, body, chat)  # compiles what it forces or checks
            grammar = await asyncio.to_thread(answer_grammar, body, plan, chat)
            messages = [m.for_template() for m in body.messages]
            prompt_ids = await asyncio.to_thread(chat.encode_chat, messages, body.tools or None)
            context = engine.stats().max_context_tokens
            asked = body.max_completion_tokens or body.max_tokens
            most = max_tokens_within(asked, len(prompt_ids), context, DEFAULT_MAX_TOKENS, "messages")
            gen = _request(body, prompt_ids, most, counter, plan, grammar, chat.generation_defaults, private)
        except GatewayError as exc:  # BadRequest, PromptTooLong: the gateway's own answer
            return JSONResponse(exc.body(), exc.status_code)
        except RequestRejected as exc:
            return error_response(400, *_rejected(exc))
        except (ValueError, RecursionError) as exc:  # a content part that is not text
            return error_response(400, f"bad request: {str(exc)[:200]}", "invalid_request")
        include_usage = body.include_usage()
        shape = ResponseShape.new(True, f"chatcmpl-{uuid.uuid4().hex}", model_id, include_usage)
        logprobs = None
        if body.wanted_top_logprobs() is not None:
            logprobs = Logprobs(True, chat.token_text, chat.token_bytes, keep=not body.stream)
        stream = _as_worker_chunks(engine.generate(gen))
        if body.stream:
            events = _sse(shape, stream, logprobs, plan, include_usage)
            return StreamingResponse(events, media_type="text/event-stream")

        async def whole() -> tuple[str, object]:
            text, last = "", None
            try:
                async for chunk in stream:
                    text += chunk.text
                    if logprobs is not None:
                        logprobs.of(chunk)
                    last = chunk
            finally:
                await stream.aclose()  # cancelled as the client left: the engine frees the request
            return text, last

        try:
            done = await unless_the_client_leaves(request, whole())
        except RequestRejected as exc:
            return error_response(400, *_rejected(exc, plan))
        except Exception:  # noqa: BLE001 - never a bare stack trace to the client
            log.exception("the engine failed")
            return error_response(500, "the engine failed; see this process's log", "server_error")
        if done is None:
            return client_gone()
        text, last = done
        raw, calls = text, []
        if plan is not None:
            text, calls = plan.parse(raw, last.finish_reason)
        answered = answer_logprobs(logprobs, plan, raw, calls) if logprobs else None
        finish = plan.calls_finish if plan is not None else "tool_calls"
        return shape.whole(text, last.finish_reason, last.usage, answered, calls, finish)


async def _as_worker_chunks(stream):
    """The engine's chunks as a worker sends them (serving.worker_service.chunk_to_proto), so the answer is formatted
    by the same code as the gateway's; closing this closes the engine's stream, which frees the request."""
    try:
        async for chunk in stream:
            yield chunk_to_proto(chunk)
    finally:
        await stream.aclose()


async def _sse(shape: ResponseShape, stream, logprobs: Logprobs | None, plan: ToolPlan | None, include_usage: bool):
    """The answer as server-sent events; a failure after the headers is an error event, then [DONE], never a cut."""
    held = plan.streamed() if plan else None
    try:
        yield shape.opening(may_call=held is not None)  # inside: a stream closed here still frees the request
        async for chunk in stream:
            these = logprobs.of(chunk) if logprobs is not None else None
            text = held.push(chunk.text) if held is not None else chunk.text
            these = held.logprobs(these) if held is not None else these
            if text or these:
                yield shape.chunk(text, logprobs=these)
            if chunk.finish_reason:
                for event in shape.ending(chunk.finish_reason, held):
                    yield event
                if include_usage:
                    yield shape.usage_chunk(chunk.usage)
    except RequestRejected as exc:
        yield sse(_error_body(400, *_rejected(exc, plan)))
    except Exception:  # noqa: BLE001 - headers are sent: the client hears of it
        log.exception("the engine's stream failed")
        yield sse(_error_body(500, "the engine failed mid-answer; see this process's log"))
    finally:
        await stream.aclose()
    yield SSE_DONE


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """An unknown route or method in OpenAI's error shape, as the gateway answers it (FastAPI's is `{"detail"}`)."""
    message, code = framework_refusal(exc.status_code, str(exc.detail))
    if code != "invalid_request":  # not the body: the route or method
        message = f"{request.method} {request.url.path[:200]}: {message}"
    body = _error_body(exc.status_code, message, code or "invalid_request")
    return JSONResponse(body, exc.status_code, headers=getattr(exc, "headers", None))


def _error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict:
    """OpenAI's error object: the body of an error response, or of an error event in a stream."""
    error_type = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}

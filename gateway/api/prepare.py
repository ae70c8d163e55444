"""From an HTTP request to what routing needs: prompt ids and features. Shared by generation and explain."""

from dataclasses import dataclass

from fastapi import Request
from opentelemetry import trace

from gateway.api.schemas import ChatCompletionRequest, CompletionRequest, _GenerationParams
from gateway.classify.classify import classify
from gateway.classify.features import RequestFeatures
from gateway.errors import BadRequest, ModelNotFound, PromptTooLong
from gateway.policy.schema import Policy
from gateway.state import GatewayState

tracer = trace.get_tracer(__name__)


@dataclass(frozen=True)
class Prepared:
    prompt_ids: list[int]
    features: RequestFeatures
    text: str  # what the prompt spells; traced only when TANDEM_TRACE_CONTENT is on and the request is not private


def prepare_chat(body: ChatCompletionRequest, request: Request, state: GatewayState, policy: Policy) -> Prepared:
    _check(body, state)
    with tracer.start_as_current_span("gateway.tokenize") as span:
        try:
            messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        prompt_ids = state.tokenizer.encode_chat(messages)
        span.set_attribute("tandem.prompt_tokens", len(prompt_ids))
    text = "\n".join(m["content"] for m in messages)
    requested = body.max_completion_tokens or body.max_tokens
    return Prepared(prompt_ids, _classify(body, prompt_ids, text, requested, request, state, policy), text)


def prepare_completion(body: CompletionRequest, request: Request, state: GatewayState, policy: Policy) -> Prepared:
    _check(body, state)
    if body.echo:
        raise BadRequest("echo is not supported")
    with tracer.start_as_current_span("gateway.tokenize"):
        if isinstance(body.prompt, str):
            text, prompt_ids = body.prompt, state.tokenizer.encode(body.prompt)
        else:
            vocab = state.tokenizer.tokenizer.get_vocab_size()
            bad = [t for t in body.prompt if not 0 <= t < vocab]
            if bad:
                raise BadRequest(f"prompt token ids out of range [0, {vocab}): {bad[:5]}")
            # Token ids must not be a way around the detectors: scan what they spell.
            prompt_ids, text = list(body.prompt), state.tokenizer.tokenizer.decode(body.prompt)
    return Prepared(prompt_ids, _classify(body, prompt_ids, text, body.max_tokens, request, state, policy), text)


def _check(body: _GenerationParams, state: GatewayState) -> None:
    if body.model != state.model_id:
        raise ModelNotFound(f"model {body.model!r} does not exist; this gateway serves {state.model_id!r}")
    unsupported = body.unsupported_fields()
    if unsupported:
        raise BadRequest(f"not supported by Tandem: {', '.join(unsupported)}")


def _max_tokens(requested: int | None, num_prompt: int, state: GatewayState) -> int:
    context = state.tokenizer.max_context_tokens
    room = context - num_prompt
    max_tokens = requested or min(state.settings.default_max_tokens, room)
    if room < 1 or max_tokens > room:
        raise PromptTooLong(
            f"prompt ({num_prompt} tokens) + max_tokens ({max_tokens}) exceeds the model's context of {context} tokens"
        )
    return max_tokens


def _classify(
    body: _GenerationParams,
    prompt_ids: list[int],
    text: str,
    requested_max: int | None,
    request: Request,
    state: GatewayState,
    policy: Policy,
) -> RequestFeatures:
    max_tokens = _max_tokens(requested_max, len(prompt_ids), state)
    with tracer.start_as_current_span("gateway.classify") as span:
        features = classify(
            policy,
            text=text,
            prompt_tokens=len(prompt_ids),
            max_tokens=max_tokens,
            metadata_privacy=(body.metadata or {}).get("privacy"),
            privacy_header=request.headers.get("x-tandem-privacy"),
            device_header=request.headers.get("x-tandem-device"),
            reported_device=state.edge_agents.device(request.headers.get("x-tandem-agent")),
            tenant=request.state.tenant,  # set by the auth dependency
            priority=body.priority,
        )
        span.set_attribute("tandem.privacy_tags", sorted(features.privacy_tags))
        span.set_attribute("tandem.detected", list(features.detected))
        return features

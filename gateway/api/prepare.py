"""From an HTTP request to what routing needs: prompt ids and features. Shared by generation and explain.

Tokenizing and scanning for PII cost time proportional to the prompt, so for
a large body both run in a worker thread, never on the event loop; a small one
(under INLINE_BODY_BYTES) is done inline, where the thread hop would cost more
than the work (bench/gateway_overhead.py). The text scanned is what
`tandem_sdk.scan.request_text` says the request carries (the same function
the SDK runs on the device), not only the prompt.
"""

import asyncio
import contextvars
import dataclasses
import functools
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fastapi import Request
from tandem_sdk.detectors import Scan
from tandem_sdk.scan import request_text

from gateway import privacy, via
from gateway.classify.classify import classify
from gateway.classify.features import DeviceCapability, RequestFeatures
from gateway.policy.schema import Policy
from gateway.state import GatewayState, ServedModel
from serving import spans
from serving.grammar import CACHE_SCOPE, REMEMBERED_ONLY, NotRemembered
from serving.openai.answer import ToolPlan, answer_grammar, check_token_ids, max_tokens_within, shaped, tool_plan
from serving.openai.chat_tokenizer import ChatTokenizer
from serving.openai.errors import BadRequest
from serving.openai.schemas import ChatCompletionRequest, CompletionRequest, _GenerationParams

tracer = spans.get_tracer(__name__)  # the SDK's spans at a fraction of their cost (serving/spans.py)
INLINE_BODY_BYTES = 2048  # below this, tokenizing, scanning and classifying take well under a millisecond
INLINE_COMPILE_BYTES = 64 * 1024  # below this, a request's remembered grammars are looked up on the event loop


# Grammars (response_format, a forced call, strict functions) compile here, not in the default pool that tokenizing
# and the privacy scan share (a review: another tenant's request waited 4.4 s behind twelve), and the ~100-200 MB a
# compiling thread keeps is kept by two threads, not the default pool's six. A tenant compiles one thing at a time
# (its other requests wait for it, not in the pool), so another tenant's finds a thread free; and what is remembered
# (the same schema again: serving.grammar) answers on the event loop, queueing for nothing (a review: a plain
# json_object request waited 12 s behind another tenant's 24 schemas).
_COMPILING = ThreadPoolExecutor(max_workers=2, thread_name_prefix="grammar")
_TENANT_COMPILES: "weakref.WeakValueDictionary[str, asyncio.Lock]" = weakref.WeakValueDictionary()


async def _compiling(request: Request, fn, *args):
    """fn(*args) from what is remembered, on the event loop (a body under INLINE_COMPILE_BYTES: reading a larger
    one's schemas again costs milliseconds); else in a compiling thread, this tenant's turn."""
    if _body_under(request, INLINE_COMPILE_BYTES):
        remembered_only = REMEMBERED_ONLY.set(True)
        try:
            return fn(*args)
        except NotRemembered:
            pass
        finally:
            REMEMBERED_ONLY.reset(remembered_only)
    tenant = CACHE_SCOPE.get()
    turn = _TENANT_COMPILES.get(tenant)
    if turn is None:
        turn = _TENANT_COMPILES[tenant] = asyncio.Lock()
    await turn.acquire()
    try:
        compiling = asyncio.get_running_loop().run_in_executor(_COMPILING, contextvars.copy_context().run, fn, *args)
    except BaseException:
        turn.release()
        raise
    # The turn is the thread's, not the request's: a client that leaves mid-compile leaves it compiling, and the
    # tenant's next compile waits for that to end (released when the request went, it took the pool's other thread;
    # a review)
    compiling.add_done_callback(lambda _: turn.release())
    return await asyncio.shield(compiling)


def _body_under(request: Request, size: int) -> bool:
    length = request.headers.get("content-length", "")
    return length.isascii() and length.isdigit() and int(length) < size


async def _off_loop(request: Request, fn, *args, **kwargs):
    """fn(*args, **kwargs), in a worker thread unless the request body is small."""
    if _body_under(request, INLINE_BODY_BYTES):
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


@dataclass(frozen=True)
class Prepared:
    prompt_ids: list[int]
    features: RequestFeatures
    text: str  # what the prompt spells; traced only when TANDEM_TRACE_CONTENT is on and the request is not private
    grammar: str = ""  # what the answer must follow (response_format, or a forced tool call); "" for none
    tools: ToolPlan | None = None  # with tools (and tool_choice other than "none"): how to read calls from the answer
    model: ServedModel | None = None  # the request's model: its tokenizer and prefix hints


async def prepare_chat(body: ChatCompletionRequest, request: Request, state: GatewayState, policy: Policy) -> Prepared:
    model = _check(body, state, policy)
    CACHE_SCOPE.set(request.state.tenant)  # (this request's task only) compiles remembered for its tenant alone
    try:
        messages = [m.for_template() for m in body.messages]
    except ValueError as exc:
        raise BadRequest(str(exc), param="messages") from exc
    # Without tools there is nothing to compile (only tool_choice to refuse); with them, before the template reads
    # them: one it cannot read is refused here, by name
    calls = (
        await _compiling(request, tool_plan, body, model.tokenizer) if body.tools else tool_plan(body, model.tokenizer)
    )
    grammar = await _compiling(request, answer_grammar, body, calls, model.tokenizer) if shaped(body, calls) else ""
    prompt_ids, scan = await _off_loop(request, _tokenize_chat, body, messages, model.tokenizer)
    text = "\n".join(m["content"] for m in messages)
    requested = body.max_completion_tokens or body.max_tokens
    # each turn is read on its own as well: a number ending one turn hides nothing at the start of the next
    turns = [m["content"] for m in messages] if len(messages) > 1 else None
    (features,) = await _classify(
        body, model, [len(prompt_ids)], scan, requested, request, state, policy, "messages", turns
    )
    return Prepared(prompt_ids, features, text, grammar, calls, model)


async def prepare_completion(
    body: CompletionRequest, request: Request, state: GatewayState, policy: Policy
) -> list[Prepared]:
    """One Prepared per prompt of the request, in order. The privacy scan reads the whole request, so a batch is
    classified as one: a prompt with personal data keeps every prompt of its batch where private requests go."""
    model = _check(body, state, policy)
    CACHE_SCOPE.set(request.state.tenant)
    if body.max_tokens == 0 and not body.echo:
        raise BadRequest("max_tokens: 0 asks for no answer; with echo: true, for the prompt alone", param="max_tokens")
    prompts = body.prompts()
    most = state.settings.max_batch
    if len(prompts) > most:
        raise BadRequest(
            f"a batch of {len(prompts)} prompts: at most {most} on this gateway (TANDEM_MAX_BATCH)", param="prompt"
        )
    if len(prompts) > 1 and len(prompts) * body.n > most:  # one request holds no more sequences than that
        raise BadRequest(
            f"{len(prompts)} prompts × n {body.n} = {len(prompts) * body.n} choices: at most {most} on this gateway "
            "(TANDEM_MAX_BATCH)",
            param="n",
        )
    vocab = model.tokenizer.tokenizer.get_vocab_size()
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str) and (bad := [t for t in prompt if not 0 <= t < vocab]):
            where = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
            raise BadRequest(f"{where} token ids out of range [0, {vocab}): {bad[:5]}", param="prompt")
    tokenized, read, scan = await _off_loop(request, _tokenize_completion, body, prompts, model.tokenizer)
    grammar = await _compiling(request, answer_grammar, body, None, model.tokenizer) if shaped(body, None) else ""
    lengths = [len(prompt_ids) for prompt_ids, _ in tokenized]
    features = await _classify(body, model, lengths, scan, body.max_tokens, request, state, policy, "prompt", read)
    batch = [
        Prepared(prompt_ids, each, text, grammar, model=model)
        for (prompt_ids, text), each in zip(tokenized, features, strict=True)
    ]
    return batch


def _tokenize_chat(body: ChatCompletionRequest, messages: list[dict], chat: ChatTokenizer) -> tuple[list[int], Scan]:
    with spans.Stages.stage(tracer, "gateway.tokenize") as span:
        prompt_ids = chat.encode_chat(messages, body.tools if body.tools else None)
        span.set_attribute("tandem.prompt_tokens", len(prompt_ids))
    return prompt_ids, _scan(body, chat)


def _tokenize_completion(
    body: CompletionRequest, prompts: list[str | list[int]], chat: ChatTokenizer
) -> tuple[list[tuple[list[int], str]], list[str] | None, Scan]:
    """Each prompt's token ids and text; a batch's prompts as the scan reads each on its own (None for one
    prompt); and the scan of the whole request."""
    with spans.Stages.stage(tracer, "gateway.tokenize") as span:
        tokenized = [
            (chat.encode(prompt), prompt) if isinstance(prompt, str) else (list(prompt), chat.tokenizer.decode(prompt))
            for prompt in prompts
        ]
        span.set_attribute("tandem.prompt_tokens", sum(len(ids) for ids, _ in tokenized))
    read = [p if isinstance(p, str) else _as_read(chat)(p) for p in prompts] if len(prompts) > 1 else None
    return tokenized, read, _scan(body, chat)


def _as_read(chat: ChatTokenizer):
    """Token ids as the scan reads them: special tokens kept as their text (`<|endoftext|>`), which parts what is
    on either side. Dropped, `4111 1111 1111 1111<|endoftext|>1` read as `…1111 11111` (a review)."""
    return functools.partial(chat.tokenizer.decode, skip_special_tokens=False)


def _scan(body: _GenerationParams, chat: ChatTokenizer) -> Scan:
    """The request's text as the detectors read it; token ids are decoded, so they are no way around them."""
    dumped = body.model_dump(exclude_none=True)  # metadata too: request_text skips only its privacy tags
    scan = Scan(request_text(dumped, decode=_as_read(chat)))
    scan.clusters  # noqa: B018 - found here, in the thread, not later on the event loop
    return scan


def _check(body: _GenerationParams, state: GatewayState, policy: Policy) -> ServedModel:
    model = state.served(body.model, policy)  # 404 model_not_found naming it, under the request's one policy
    if refused := body.refused_field():
        raise BadRequest(refused[1], param=refused[0])
    if body.n > state.settings.max_n:
        raise BadRequest(f"n is at most {state.settings.max_n} on this gateway (TANDEM_MAX_N)", param="n")
    check_token_ids(body, model.tokenizer.tokenizer.get_vocab_size())
    return model


def _max_tokens(
    requested: int | None, num_prompt: int, model: ServedModel, state: GatewayState, prompt_field: str
) -> int:
    context = state.registry.context_of(model.id, model.tokenizer.max_context_tokens)
    return max_tokens_within(requested, num_prompt, context, state.settings.default_max_tokens, prompt_field)


TANDEM_REQUEST_HEADERS = (b"x-tandem-privacy", b"x-tandem-device", b"x-tandem-agent", b"x-tandem-tenant")
_NOT_LETTERS = bytes(c for c in range(256) if not 97 <= c <= 122)  # ASGI header names are lower-case


def check_tandem_headers(request: Request) -> None:
    """An `X-Tandem-*` header the gateway does not read is a 400 naming it: a mistyped `X-Tandem-Privcy: pii`,
    ignored, would route the request as untagged. So is any header whose letters spell `tandem` or `privacy`
    otherwise: with underscores (`X_Tandem_Privacy`, which CGI-style stacks treat as the same header and many
    proxies drop), without the `X-` (`Tandem-Privacy`, `Privacy`, `X-Privacy`), with dots or doubled dashes."""
    for name, _ in request.scope["headers"]:
        if name in TANDEM_REQUEST_HEADERS:
            continue
        letters = name.translate(None, _NOT_LETTERS)  # x_tandem.privacy, X--Tandem-Privacy: xtandemprivacy
        if b"tandem" not in letters and b"privacy" not in letters:
            continue
        known = ", ".join(n.decode().title() for n in TANDEM_REQUEST_HEADERS)
        shown = name.decode("latin-1")[:64].title()
        meant = next((n for n in TANDEM_REQUEST_HEADERS if letters.endswith(n.rpartition(b"-")[2])), None)
        advice = f" (did you mean {meant.decode().title()}?)" if meant is not None else ""
        raise BadRequest(f"unknown header {shown}{advice}; the Tandem request headers are {known}", param=shown)


def tandem_header(request: Request, name: str, repeatable: bool = False) -> str | None:
    """A Tandem header as text (UTF-8, as clients send it). A list header sent more than once is one list, as HTTP
    says (RFC 9110 5.3): a second `X-Tandem-Privacy: pii` must not be dropped. Any other is refused twice."""
    values = request.headers.getlist(name)
    if not values:
        return None
    if len(values) > 1 and not repeatable:
        raise BadRequest(f"{name} is sent {len(values)} times; send it once", param=name)
    try:
        return ",".join(value.encode("latin-1").decode("utf-8") for value in values)
    except UnicodeDecodeError:
        raise BadRequest(f"{name} is not valid UTF-8", param=name) from None


def _agents_device(request: Request, state: GatewayState) -> DeviceCapability | None:
    """The device capability an edge agent named in X-Tandem-Agent reported. An agent this gateway has not heard
    from was no device at all, silently: rules on `device` judged the request as if no header was sent."""
    agent_id = tandem_header(request, "X-Tandem-Agent")
    if agent_id is None or tandem_header(request, "X-Tandem-Device"):
        return None  # the caller's own X-Tandem-Device wins: no agent's report is read (a review: it was a 400)
    if (device := state.edge_agents.device(agent_id)) is None:
        raise BadRequest(
            f"X-Tandem-Agent: no edge agent {agent_id[:128]!r} is registered with this gateway (an agent registers as"
            f" it starts and is dropped {state.edge_agents.ttl_s:g} s after its last heartbeat); send X-Tandem-Device"
            " with the device's capability instead",
            param="X-Tandem-Agent",
        )
    return device


async def _classify(
    body: _GenerationParams,
    model: ServedModel,
    prompt_lengths: list[int],
    scan: Scan,
    requested_max: int | None,
    request: Request,
    state: GatewayState,
    policy: Policy,
    prompt_field: str,
    prompt_texts: list[str] | None = None,
) -> list[RequestFeatures]:
    """Each prompt's features (a completions batch has several): classified once, from the scan of the whole
    request and each of `prompt_texts` (a batch's prompts, a chat's turns) on its own, so every prompt has the same
    privacy tags."""
    batch = len(prompt_lengths) > 1
    fields = [f"{prompt_field}[{i}]" for i in range(len(prompt_lengths))] if batch else [prompt_field]
    max_tokens = [
        _max_tokens(requested_max, length, model, state, field)
        for length, field in zip(prompt_lengths, fields, strict=True)
    ]
    check_tandem_headers(request)
    via.arrived(request.headers.getlist(via.HEADER))
    raw = await request.body()
    if privacy.may_repeat_keys(raw):  # a count on the loop; the rare parse off it when the body is large
        await _off_loop(request, privacy.check_no_repeated_keys, raw)
    with spans.Stages.stage(tracer, "gateway.classify") as span:
        first = await _off_loop(
            request,
            classify,
            policy,
            text=scan,
            parts=prompt_texts if prompt_texts and len(prompt_texts) > 1 else (),
            prompt_tokens=prompt_lengths[0],
            max_tokens=max_tokens[0],
            metadata_privacy=privacy.metadata_privacy(policy, body),
            privacy_header=tandem_header(request, "X-Tandem-Privacy", repeatable=True),
            device_header=tandem_header(request, "X-Tandem-Device"),
            reported_device=_agents_device(request, state),
            tenant=request.state.tenant,  # set by the auth dependency
            priority=state.tenants.allowed_priority(request.state.tenant, body.priority),
            model=model.id,
        )
        span.set_attribute("tandem.privacy_tags", sorted(first.privacy_tags))
        span.set_attribute("tandem.detected", list(first.detected))
    rest = zip(prompt_lengths[1:], max_tokens[1:], strict=True)
    return [first, *(dataclasses.replace(first, prompt_tokens=length, max_tokens=most) for length, most in rest)]

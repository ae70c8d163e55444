"""The request service behind `/v1/chat/completions` and `/v1/completions`: admit, prepare (tokenize once,
classify), dispatch, and format the answer whole or streamed, with its spans, metrics and usage record. The route
handlers (gateway/api/openai_routes.py) only call `serve`."""

import asyncio
import contextlib
import dataclasses
import functools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import anyio
import grpc
from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from opentelemetry import context, trace

from gateway import metrics, privacy
from gateway.api.prepare import Prepared
from gateway.auth import shows_backend_addresses
from gateway.backends.worker_backend import BackendError, hide_addresses
from gateway.dispatch import RoutedStream, dispatch
from gateway.limits.admission import Admission
from gateway.policy.schema import Policy
from gateway.state import GatewayState
from proto.gen import worker_pb2
from serving import spans
from serving.client_leaves import client_gone, unless_the_client_leaves
from serving.grammar import refused
from serving.openai.answer import ToolPlan, answer_logprobs, stops_for
from serving.openai.errors import BackendFailed, BadRequest, GatewayError
from serving.openai.format import SSE_DONE, Logprobs, ResponseShape, sse, usage_dict
from serving.openai.schemas import _GenerationParams

log = logging.getLogger(__name__)
tracer = spans.get_tracer(__name__)  # the SDK's spans at a fraction of their cost (serving/spans.py)
Prepare = Callable[..., Awaitable[Prepared]]  # prepare_chat or prepare_completion (gateway/api/prepare.py)
T = TypeVar("T")


async def serve(
    body: _GenerationParams, request: Request, state: GatewayState, policy: Policy, prepare: Prepare, chat: bool
):
    """One generation request, from admission to the last byte of its answer, under one policy (the one in force
    when it came: a reload that lands meanwhile does not change it)."""
    admission = await state.admission.admit(request.state.tenant)  # before any work on the prompt
    try:
        prepared = await prepare(body, request, state, policy)
        batch = prepared if isinstance(prepared, list) else [prepared]  # completions: one per prompt
        await admission.charge(sum(len(p.prompt_ids) + p.features.max_tokens * body.n for p in batch))
    except BaseException:
        await admission.release(0)
        raise
    prefix = "chatcmpl" if chat else "cmpl"
    shape = ResponseShape.new(chat, f"{prefix}-{secrets.token_hex(16)}", batch[0].model.id, body.include_usage())
    return await _serve(body, batch, shape, state, policy, admission, request)


@dataclass(frozen=True)
class _Choice:
    """One choice to answer: its prompt (`prepared`), the request sent for it, and its index in the answer (a
    batch's prompt p with n choices: p * n + j, as OpenAI's)."""

    prepared: Prepared
    request: worker_pb2.GenerateRequest
    index: int


def _choices(body: _GenerationParams, batch: list[Prepared], response_id: str, cache_salt: str) -> list[_Choice]:
    """Each prompt's n choices: n requests (seeds seed, seed + 1, ...; so a prompt of a batch gets the tokens it would
    get alone), each routed on its own, sharing the prompt's cached prefix."""
    choices = []
    for p, prepared in enumerate(batch):
        base = _generate_request(body, prepared, response_id, cache_salt)
        for j in range(body.n):
            index = p * body.n + j
            one = base if len(batch) == body.n == 1 else _nth_choice(base, index, j)
            choices.append(_Choice(prepared, one, index))
    return choices


def _generate_request(
    body: _GenerationParams, prepared: Prepared, response_id: str, cache_salt: str
) -> worker_pb2.GenerateRequest:
    features = prepared.features
    stop_strings, stop_token_ids = stops_for(body, prepared.tools)
    return worker_pb2.GenerateRequest(
        request_id=response_id,
        tenant=features.tenant,
        cache_salt=cache_salt,
        model=prepared.model.id,
        prompt_token_ids=prepared.prompt_ids,
        sampling=worker_pb2.SamplingParams(
            **body.sampling(prepared.model.tokenizer.generation_defaults),
            seed=body.seed,
            max_tokens=features.max_tokens,
            stop_strings=stop_strings,
            stop_token_ids=stop_token_ids,
            ignore_eos=body.ignore_eos,
            presence_penalty=body.presence_penalty,
            frequency_penalty=body.frequency_penalty,
            logit_bias=body.token_biases(),
            top_logprobs=body.wanted_top_logprobs(),
            grammar=prepared.grammar,  # response_format's, or a forced tool call's; checked by prepare
            prompt_logprobs=body.wanted_prompt_logprobs(),
        ),
        priority=features.priority,  # clamped to the tenant's allowance
    )


async def _serve(
    body: _GenerationParams,
    batch: list[Prepared],
    shape: ResponseShape,
    state: GatewayState,
    policy: Policy,
    admission: Admission,
    request: Request,
):
    features = batch[0].features
    x_request_id = _x_request_id(request)
    choices = _choices(body, batch, shape.response_id, state.tenants.cache_salt(features.tenant))
    started = time.perf_counter()
    # A streamed answer of several choices starts sending once its first choice has its first token; the others
    # start in turn while it streams (all first would keep a client waiting for n first tokens, or, on an edge
    # agent that answers one sequence at a time, for every choice but the last to end).
    at_once = choices[:1] if body.stream else choices  # started before the answer is
    batched = len(batch) > 1

    def private() -> bool:
        """Whether the request is private: dispatch says so on each choice it starts (ask only after one started;
        a batch's prompts share their privacy, so the first says it for all)."""
        return any(choice.request.private for choice in choices)

    def unrouted(status: str, unstarted: list[_Choice] | None = None) -> None:
        """The decision of a request that was not started (`status`: why): the request's one, or, for choices
        that could not start while the answer streamed (`unstarted`), one for each prompt none of whose started."""
        if not state.decisions:
            return
        if unstarted is None:
            state.decisions.record(shape.response_id, features, None, None, None, status, x_request_id)
            return
        for choice in unstarted:
            if choice.index % body.n == 0:
                state.decisions.record(
                    shape.response_id, choice.prepared.features, None, None, None, status, x_request_id,
                    prompt=choice.index // body.n if batched else None,
                )  # fmt: skip

    def failed(exc: GatewayError, unstarted: list[_Choice] | None = None) -> None:
        code = exc.code or "error"
        metrics.REQUESTS.labels("none", "none", features.tenant, code).inc()
        unrouted(code, unstarted)

    def begin(one: RoutedStream, choice: _Choice) -> None:
        """A started choice: its decision (one per prompt: a batch's prompts may be routed apart, at its first
        choice), its usage record, idle timeout and first-token time."""
        if state.decisions:
            if choice.index % body.n == 0:
                state.decisions.record(
                    shape.response_id, choice.prepared.features, one.rule, one.pool, one.backend.endpoint, "routed",
                    x_request_id, prompt=choice.index // body.n if batched else None,
                )  # fmt: skip
            user = None if private() else (body.user or body.safety_identifier)  # never a private request's user
            one.on_end = functools.partial(
                state.decisions.usage, shape.response_id, features.tenant, user,
                choice=choice.index if len(choices) > 1 else None, counts_prompt=choice.index % body.n == 0,
            )  # fmt: skip
        one.idle_timeout_s = state.settings.stream_idle_timeout_s
        metrics.TTFT.labels(one.pool).observe(one.ttft_s)
        state.ttft.add(one.pool, one.ttft_s)

    try:
        routed_all = await _dispatch_all(at_once, policy, state, started, request)
        if routed_all is None:  # the client left while its choices were being started: its prompts stay charged, as
            await admission.release(sum(len(p.prompt_ids) for p in batch))  # a stream stopped early keeps its own
            unrouted("client_closed")  # its decision all the same (replay counts what came)
            return client_gone()
    except BaseException as exc:
        await admission.release(0)
        if isinstance(exc, GatewayError):
            failed(exc)
        raise
    routed = routed_all[0]
    try:
        for one, choice in zip(routed_all, choices, strict=False):
            begin(one, choice)
    except BaseException:  # nothing is answered: what started is closed and the tenant's slot freed, never held
        for one in routed_all:
            await one.aclose()
        await admission.release(0)
        raise
    span = trace.get_current_span()
    genai = _genai_request(shape, choices[0].request, len(choices))
    span.set_attributes(
        genai | {"tandem.rule": routed.rule, "tandem.pool": routed.pool, "tandem.backend": routed.backend.endpoint}
    )
    trace_content = privacy.may_trace_content(private(), state.settings.trace_content)
    parent = context.get_current()

    def traced(prepared: Prepared) -> _StreamTrace:
        return _StreamTrace(parent, prepared.text if trace_content else None, genai)

    headers = {
        "X-Tandem-Route": f"{routed.pool}; rule={routed.rule}",
        "X-Tandem-Backend": routed.backend.endpoint if shows_backend_addresses(request) else routed.label,
        **admission.headers(),  # x-ratelimit-*, where the tenant has limits
    }

    echo = body.echoes()  # completions: the prompt before the answer
    tools = batch[0].tools

    def logprobs(prepared: Prepared) -> Logprobs | None:
        if body.wanted_top_logprobs() is None:
            return None
        tokenizer = prepared.model.tokenizer
        return Logprobs(
            shape.is_chat,
            tokenizer.token_text,
            tokenizer.token_bytes,
            prepared.prompt_ids if echo else None,
            keep=not body.stream,  # a streamed answer sends each entry once, and keeps none
        )

    def prefix(prepared: Prepared) -> str:
        return prepared.text if echo else ""

    include_usage = shape.streams_usage
    logprobs_wanted = body.wanted_top_logprobs() is not None
    if len(choices) == 1:
        one = batch[0]
        if body.stream:
            events = _stream_events(
                routed, shape, include_usage, started, admission, traced(one), logprobs(one), tools, prefix=prefix(one)
            )
            return ClosingStreamingResponse(events, media_type="text/event-stream", headers=headers)
        work = _collect(routed, shape, started, admission, traced(one), logprobs(one), tools, prefix(one))
        with _saying_where(headers):
            answer = await unless_the_client_leaves(request, work)
        return await _json_response(answer, headers, logprobs_wanted) if answer is not None else client_gone()
    shared = _SharedAdmission(admission, len(choices))
    shapes = [dataclasses.replace(shape, index=choice.index) for choice in choices]
    firsts = {choice.index for choice in choices if choice.index % body.n == 0}  # each prompt's tokens counted once
    usages: dict[int, worker_pb2.Usage] = {}  # each choice's, by index, as they end

    def share(choice: _Choice) -> _Share:
        return shared.share(0 if choice.index in firsts else len(choice.prepared.prompt_ids))

    if body.stream:

        def events_of(one: RoutedStream, choice: _Choice) -> AsyncIterator[str]:
            return _stream_events(
                one,
                shapes[choice.index],
                False,
                started,
                share(choice),
                traced(choice.prepared),
                logprobs(choice.prepared),
                tools,
                usages=usages,
                done=False,
                prefix=prefix(choice.prepared),
            )

        async def the_others() -> AsyncIterator[AsyncIterator[str] | str]:
            """Each later choice's events once it has its first token, in turn; a choice that cannot start ends
            the starting with an error event (those started go on). Those never started give their share back."""
            left = choices[len(at_once) :]
            try:
                while left:
                    try:
                        one = await _dispatch(left[0], policy, state, started)
                    except GatewayError as exc:
                        failed(exc, left)
                        yield _error_event(exc)  # the last item: the merge starts nothing more
                        return
                    except Exception as exc:  # noqa: BLE001 - headers are sent: the stream says what happened
                        log.exception("starting choice %d failed", left[0].index)
                        yield _error_event(GatewayError(f"the gateway failed mid-answer ({type(exc).__name__})"))
                        return
                    choice = left.pop(0)
                    begin(one, choice)
                    yield events_of(one, choice)
            finally:
                for _ in left:
                    await shared.release(0)

        events = _merged(
            [events_of(routed, choices[0])], shape, usages if include_usage else None, firsts, the_others()
        )
        return ClosingStreamingResponse(events, media_type="text/event-stream", headers=headers)
    with _saying_where(headers):
        answers = await unless_the_client_leaves(
            request,
            _first_failure_ends_all(
                [
                    _collect(
                        one,
                        s,
                        started,
                        share(choice),
                        traced(choice.prepared),
                        logprobs(choice.prepared),
                        tools,
                        prefix(choice.prepared),
                        usages,
                    )  # fmt: skip
                    for one, s, choice in zip(routed_all, shapes, choices, strict=True)
                ]
            ),
        )
    if answers is None:
        return client_gone()
    merged = answers[0] | {"choices": [a["choices"][0] for a in answers], "usage": usage_dict(_summed(usages, firsts))}
    return await _json_response(merged, headers, logprobs_wanted)


async def _dispatch_all(
    choices: list[_Choice], policy: Policy, state: GatewayState, started: float, request: Request
) -> list[RoutedStream] | None:
    """Each choice started on its backend in turn, the next once the one before has its first token; None when
    the client left meanwhile (what had started is closed; one queued behind others on an edge agent leaves its
    queue then, not at its turn, a prefill later). In turn, not all at once: a half-open breaker lets
    one probe through, which the others would find taken (a 503 for the batch, the probe given back without a
    verdict), and an edge agent answers one sequence at a time, so a choice queued there waits for the one before
    it to finish, not for every one before it (its first-token deadline counts from its own start)."""

    started_ones: list[RoutedStream] = []

    async def in_turn() -> list[RoutedStream]:
        for choice in choices:
            started_ones.append(await _dispatch(choice, policy, state, started))
        return started_ones

    routed_all = None
    try:
        routed_all = await unless_the_client_leaves(request, in_turn())
        return routed_all
    finally:
        if routed_all is None:  # a failure, the client gone, or the request cancelled: nothing is left open
            for routed in started_ones:
                await routed.aclose()


async def _dispatch(choice: _Choice, policy: Policy, state: GatewayState, started: float) -> RoutedStream:
    """One choice started on a backend of its route plan: its stream, with its first token in hand."""
    routed = await dispatch(
        policy,
        state.registry,
        choice.prepared.features,
        choice.request,
        state.settings.backend_timeout_s,
        state.settings.first_token_deadline_s,
        state.settings.attempt_timeout_s,
        choice.prepared.model.hints,
        choice.prepared.prompt_ids,
    )
    routed.ttft_s = time.perf_counter() - started
    return routed


async def _first_failure_ends_all(works: list[Awaitable[T]]) -> list[T]:
    """Every work's result, in order; the first failure cancels the others (their answers, and their workers'
    sequences, stop there) and is raised."""
    tasks = [asyncio.ensure_future(work) for work in works]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        if not all(task.done() for task in tasks):
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    if errors := [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]:
        raise errors[0]
    return [task.result() for task in tasks]


def _summed(usages: dict[int, worker_pb2.Usage], firsts: set[int]) -> worker_pb2.Usage:
    """The answer's usage from its choices' (by index): each prompt's tokens once (from its first choice), every
    choice's completion tokens."""
    return worker_pb2.Usage(
        prompt_tokens=sum(u.prompt_tokens for i, u in usages.items() if i in firsts),
        completion_tokens=sum(u.completion_tokens for u in usages.values()),
        cached_prompt_tokens=sum(u.cached_prompt_tokens for i, u in usages.items() if i in firsts),
    )


async def _json_response(answer: dict, headers: dict[str, str], large: bool) -> JSONResponse:
    """The answer as JSON; encoded off the event loop when it is `large` (log-probabilities: n=8 answers of 2,000
    tokens with 20 alternatives each are 22 MB, over a second of encoding every other request would wait out)."""
    if large:
        return await asyncio.to_thread(JSONResponse, answer, headers=headers)
    return JSONResponse(answer, headers=headers)


def _x_request_id(request: Request) -> str | None:
    """The X-Request-Id the response carries (gateway/request_span.py puts it on the request's state)."""
    return getattr(request.state, "request_id", None)


def _nth_choice(request: worker_pb2.GenerateRequest, index: int, seed_offset: int) -> worker_pb2.GenerateRequest:
    one = worker_pb2.GenerateRequest()
    one.CopyFrom(request)
    one.request_id = f"{request.request_id}-{index}"
    if request.sampling.HasField("seed"):
        one.sampling.seed = (request.sampling.seed + seed_offset) % 2**63
    return one


class _SharedAdmission:
    """n choices (of one prompt or of a batch's) hold one admission: it is released, with the tokens they used
    together, when the last one ends. A prompt's tokens are counted once, by its first choice (`share`)."""

    def __init__(self, admission: Admission, parts: int) -> None:
        self._admission, self._left, self._used = admission, parts, 0

    def share(self, counted_elsewhere: int) -> "_Share":
        """What one choice releases; `counted_elsewhere`: its prompt's tokens when another choice counts them."""
        return _Share(self, counted_elsewhere)

    async def release(self, used_tokens: int | None = None) -> None:
        self._left -= 1
        self._used = None if used_tokens is None or self._used is None else self._used + used_tokens
        if self._left == 0:
            await self._admission.release(self._used)


@dataclass
class _Share:
    shared: _SharedAdmission
    counted_elsewhere: int  # the prompt tokens in this choice's usage that its prompt's first choice counts

    async def release(self, used_tokens: int | None = None) -> None:
        await self.shared.release(None if used_tokens is None else used_tokens - self.counted_elsewhere)


class ClosingStreamingResponse(StreamingResponse):
    """A stream whose answer is closed the moment the response ends, however it ends (the client left, was let go
    after TANDEM_CLIENT_STALL_S, or an error): Starlette cancels the sending but leaves the body to the garbage
    collector, so the worker's sequence, the tenant's slot and the backend's in-flight count were freed only when a
    collection happened to run (a review saw them held for over a minute)."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()


_MERGED_EVENTS_AHEAD = 64


async def _merged(
    streams: list[AsyncIterator[str]],
    shape: ResponseShape,
    usages: dict | None,
    firsts: set[int],
    more: AsyncIterator[AsyncIterator[str] | str] | None = None,
) -> AsyncIterator[str]:
    """The choices' events as they come, then the summed usage (when asked for) and [DONE]. `more`: streams that
    start later, merged as they come; an event of its own (an error) ends the starting, and the streams started go on."""
    # Bounded: the choices wait for a client that reads slowly, as one choice's stream does (unbounded, a client
    # that read nothing had every choice's whole answer held here, ~20 MB a request at n=8 with logprobs).
    queue: asyncio.Queue = asyncio.Queue(maxsize=_MERGED_EVENTS_AHEAD)
    producing = len(streams) + (more is not None)  # the producers that have not ended

    closing = False  # the reader is gone: no one takes what is put (a full queue would hold a producer forever)

    async def pump(stream: AsyncIterator[str]) -> None:
        try:
            async for event in stream:
                await queue.put(event)
        finally:
            if closing:  # cancelled, maybe at a full queue's put, outside the stream: close it here
                await stream.aclose()
            else:
                await queue.put(None)

    async def start(more: AsyncIterator[AsyncIterator[str] | str]) -> None:
        nonlocal producing
        try:
            async for item in more:
                if isinstance(item, str):  # an error: nothing more starts
                    await queue.put(item)
                    break
                producing += 1
                tasks.append(asyncio.create_task(pump(item)))
        finally:
            await more.aclose()  # cancelled between items: what it has not started gives its share back
            if not closing:
                await queue.put(None)

    tasks = [asyncio.create_task(pump(stream)) for stream in streams]
    starter = asyncio.create_task(start(more)) if more is not None else None
    try:
        while producing:
            event = await queue.get()
            if event is None:
                producing -= 1
            else:
                yield event
        if usages:
            yield shape.usage_chunk(_summed(usages, firsts))
        yield SSE_DONE
    finally:  # the client left, or all ended: every choice's stream closes (and frees its worker sequence)
        # Shielded: Starlette ends a response whose client left by cancelling its task group, which cancels again
        # at every await until the scope is left, so the gather below was cut short and the streams went on to
        # max_tokens (a review). The starter goes first and is awaited (it would start more), so a stream it
        # started has run its first step, and with it the `finally` that frees its sequence, before it is cancelled.
        closing = True
        with anyio.CancelScope(shield=True):
            if starter is not None:
                starter.cancel()
                await asyncio.gather(starter, return_exceptions=True)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _genai_request(shape: ResponseShape, request: worker_pb2.GenerateRequest, n: int) -> dict:
    """OpenTelemetry's GenAI attributes of the request (semantic conventions, gen_ai.*): the values it runs with,
    defaults applied."""
    attributes = {
        "gen_ai.operation.name": "chat" if shape.is_chat else "text_completion",
        "gen_ai.provider.name": "tandem",
        "gen_ai.request.model": request.model,
        "gen_ai.request.max_tokens": request.sampling.max_tokens,
        "gen_ai.request.temperature": request.sampling.temperature,
        "gen_ai.request.top_p": request.sampling.top_p,
        "gen_ai.response.id": shape.response_id,
    }
    if request.sampling.top_k:
        attributes["gen_ai.request.top_k"] = request.sampling.top_k
    if request.sampling.HasField("seed"):
        attributes["gen_ai.request.seed"] = request.sampling.seed
    if n > 1:
        attributes["gen_ai.request.choice.count"] = n
    return attributes


@dataclass(frozen=True)
class _StreamTrace:
    """Where the `gateway.stream` span hangs (the request's span), the prompt text when content is traced, and the
    request's GenAI attributes."""

    parent: context.Context
    prompt_text: str | None
    genai: dict

    @contextmanager
    def span(self, routed: RoutedStream, parts: list[str]) -> Iterator[trace.Span]:
        # Not made current: a streamed body may be closed from another context than it started in.
        span = tracer.start_span("gateway.stream", context=self.parent, attributes=self.genai)
        span.set_attribute("gen_ai.response.model", self.genai["gen_ai.request.model"])
        span.set_attribute("tandem.backend", routed.backend.endpoint)
        span.set_attribute("tandem.predicted_cached_tokens", routed.predicted_cached_tokens)
        try:
            yield span
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
            raise
        finally:
            if self.prompt_text is not None:
                span.set_attribute("tandem.prompt_text", self.prompt_text)
                span.set_attribute("tandem.completion_text", "".join(parts))
            span.end()


def _end_of_stream(span: trace.Span, last: worker_pb2.GenerateChunk) -> None:
    span.set_attribute("tandem.finish_reason", last.finish_reason)
    span.set_attribute("gen_ai.response.finish_reasons", [last.finish_reason])
    if last.HasField("usage"):
        span.set_attributes({
            "tandem.completion_tokens": last.usage.completion_tokens,
            "tandem.cached_prompt_tokens": last.usage.cached_prompt_tokens,
            "gen_ai.usage.input_tokens": last.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": last.usage.completion_tokens,
            "gen_ai.usage.cache_read.input_tokens": last.usage.cached_prompt_tokens,
        })  # fmt: skip


async def _collect(
    routed: RoutedStream,
    shape: ResponseShape,
    started: float,
    admission: Admission,
    traced: _StreamTrace,
    logprobs: Logprobs | None,
    tool_plan: ToolPlan | None,
    prefix: str = "",
    usages: dict | None = None,
) -> dict:
    parts: list[str] = []
    last = None
    with traced.span(routed, parts) as span:
        try:
            async for chunk in routed.chunks():  # read to the end so the RPC (and its span) completes
                parts.append(chunk.text)
                if logprobs is not None:
                    await _scored(logprobs, chunk)
                last = chunk
        except BackendError as exc:
            failure = _mid_answer(exc, routed.label, tool_plan)
            _record(routed, "request_error" if exc.is_request_fault else "backend_error", None, started)
            raise failure from exc
        except asyncio.CancelledError:  # the client left: counted, as no one's failure
            _record(routed, "client_gone", None, started)
            raise
        finally:
            await routed.aclose()
            await admission.release(_used_tokens(routed, last))
        if last is None or not last.finish_reason:
            _record(routed, "backend_error", None, started)
            log.warning(
                "backend %s (%s) ended the stream without a finish reason", routed.backend.endpoint, routed.label
            )
            raise BackendFailed(f"backend {routed.label} ended the stream without a finish reason")
        _end_of_stream(span, last)
    _record(routed, "ok", last.usage, started)
    shown = _callers_usage(routed, last.usage)
    if usages is not None:
        usages[shape.index] = shown
    raw = text = prefix + "".join(parts)
    calls = []
    if tool_plan is not None:
        text, calls = tool_plan.parse(raw, last.finish_reason)
    answered = answer_logprobs(logprobs, tool_plan, raw, calls) if logprobs else None
    finish = tool_plan.calls_finish if tool_plan is not None else "tool_calls"
    return shape.whole(text, last.finish_reason, shown, answered, calls, finish)


async def _stream_events(
    routed: RoutedStream,
    shape: ResponseShape,
    include_usage: bool,
    started: float,
    admission: Admission,
    traced: _StreamTrace,
    logprobs: Logprobs | None,
    tool_plan: ToolPlan | None,
    usages: dict | None = None,
    done: bool = True,
    prefix: str = "",
) -> AsyncIterator[str]:
    last = None
    parts: list[str] = []
    held = tool_plan.streamed() if tool_plan is not None else None
    with traced.span(routed, parts) as span:
        try:
            # Inside the try: a stream closed at its first event (a choice of n whose merge queue was full when its
            # client was let go) ran no finally, and its share of the tenant's slot was never given back (a review)
            yield shape.opening(may_call=held is not None)
            async for chunk in routed.chunks():
                these = await _scored(logprobs, chunk) if logprobs is not None else None
                parts.append(chunk.text)
                text = held.push(chunk.text) if held is not None else chunk.text
                these = held.logprobs(these) if held is not None else these
                text, prefix = prefix + text, ""  # echo: the prompt comes with the first chunk
                if text or these:
                    yield shape.chunk(text, logprobs=these)
                last = chunk
                if chunk.finish_reason:
                    _end_of_stream(span, chunk)
                    for event in shape.ending(chunk.finish_reason, held):
                        yield event
                    shown = _callers_usage(routed, chunk.usage)
                    if include_usage:
                        yield shape.usage_chunk(shown)
                    if usages is not None:
                        usages[shape.index] = shown
                    _record(routed, "ok", chunk.usage, started)
            if last is None or not last.finish_reason:
                raise BackendError.ours(
                    routed.backend.endpoint, grpc.StatusCode.INTERNAL, "stream ended without a finish reason"
                )
        except BackendError as exc:
            _record(routed, "request_error" if exc.is_request_fault else "backend_error", None, started)
            yield _error_event(_mid_answer(exc, routed.label, tool_plan))
        except Exception as exc:  # noqa: BLE001 - headers are sent: a stream never ends without a word
            log.exception("stream from %s failed", routed.backend.endpoint)
            _record(routed, "gateway_error", None, started)
            yield _error_event(GatewayError(f"the gateway failed mid-answer ({type(exc).__name__}); see its log"))
        finally:  # the client left, or the answer ended: free the worker's sequence and the tenant's slot
            if not routed.recorded:  # the client left (or was let go) mid-answer: counted, as no one's failure
                _record(routed, "client_gone", None, started)
            with anyio.CancelScope(shield=True):  # a response cancelled is cancelled again at each await (_merged)
                await routed.aclose()
                await admission.release(_used_tokens(routed, last))
    if done:
        yield SSE_DONE


LARGE_SCORED = 256  # prompt tokens a chunk scores (echo) above which its entries are built in a worker thread


async def _scored(logprobs: Logprobs, chunk: worker_pb2.GenerateChunk) -> dict | None:
    """The chunk's log-probability object; an echoed prompt's (2,048 tokens with 20 alternatives each, n=8: ~0.4 s
    of the event loop) built in a thread, where the loop gets the interpreter between its slices."""
    if len(chunk.prompt_logprobs) > LARGE_SCORED:
        return await asyncio.to_thread(logprobs.of, chunk)
    return logprobs.of(chunk)


def _callers_usage(routed: RoutedStream, usage: worker_pb2.Usage) -> worker_pb2.Usage:
    """The usage a caller is shown: without the cached count where the backend's prefix cache is every tenant's (an
    HTTP pool without `send_cache_salt`), which told one tenant which prompts another had sent (a review). The
    operator's metrics, spans and decision log keep it."""
    if not routed.backend.tenants_share_its_cache or not usage.cached_prompt_tokens:
        return usage
    shown = worker_pb2.Usage()
    shown.CopyFrom(usage)
    shown.cached_prompt_tokens = 0
    return shown


def _used_tokens(routed: RoutedStream, last: worker_pb2.GenerateChunk | None) -> int | None:
    """Tokens the request used, for the rest of its charge to be given back: its final usage's; where the answer
    ended before that (the client left or stopped reading, the backend failed), its prompt and the tokens it was
    sent (a review: a chat UI's Stop left the tenant charged its whole max_tokens, and 429s followed). None (no
    refund) where that cannot be told: an HTTP backend's text comes without its tokens' ids, several tokens an event
    for some servers (counted one each, a tenant got ten times its rate: a review), and a usage its server did not
    send reads 0 tokens made (one that did counts at least one for each event of text)."""
    if last is None or not last.HasField("usage"):
        return routed.prompt_tokens + routed.streamed_tokens if routed.counted_exactly else None
    if routed.counted_exactly or last.usage.completion_tokens >= routed.streamed_tokens:
        return last.usage.prompt_tokens + last.usage.completion_tokens
    return None


@contextlib.contextmanager
def _saying_where(headers: dict[str, str]) -> Iterator[None]:
    """A failure after routing (a 502 when the backend died mid-answer) carries the route and backend headers, as
    every routed answer does."""
    try:
        yield
    except GatewayError as exc:
        exc.headers = {**headers, **exc.headers}
        raise


def _mid_answer(exc: BackendError, label: str, tool_plan: ToolPlan | None = None) -> GatewayError:
    """What a failure after the first token is: the request's own fault (a grammar that cannot go on: a 400, as it
    is before the first token, not counted against the backend), or the backend's (the caller reads it under the
    backend's label; the log has its address)."""
    if exc.is_request_fault:
        details, param = refused(exc.details, bool(tool_plan is not None and tool_plan.grammar))
        details = hide_addresses(details, exc.endpoint)  # (a grammar engine's error can carry its parser state)
        return BadRequest(f"the request could not be answered to the end: {details}", param=param)
    log.warning("backend %s (%s) failed mid-answer: %s", exc.endpoint, label, exc)
    return BackendFailed(f"backend failed mid-answer: {exc.told(label)}")


def _error_event(error: GatewayError) -> str:
    return sse(error.body())


def _record(routed: RoutedStream, status: str, usage: worker_pb2.Usage | None, started: float) -> None:
    routed.recorded = True
    elapsed = time.perf_counter() - started
    if routed.on_end is not None:
        try:
            routed.on_end(usage=usage, status=status)
        except Exception:  # noqa: BLE001 - a record that cannot be written never fails the answer
            log.exception("the usage record of a request could not be written")
    metrics.REQUESTS.labels(routed.pool, routed.rule, routed.tenant, status).inc()
    metrics.E2E.labels(routed.pool).observe(elapsed)
    if usage is not None:
        metrics.PROMPT_TOKENS.labels(routed.pool, routed.rule, routed.tenant).inc(usage.prompt_tokens)
        metrics.PREFIX_TOKENS.labels(routed.pool, "actual").inc(usage.cached_prompt_tokens)
        metrics.COMPLETION_TOKENS.labels(routed.pool, routed.rule, routed.tenant).inc(usage.completion_tokens)
        if usage.completion_tokens > 1:
            metrics.TPOT.labels(routed.pool).observe((elapsed - routed.ttft_s) / (usage.completion_tokens - 1))

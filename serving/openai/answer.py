"""How an answer is shaped and checked before any token: tool calls, grammars, token ids.

The gateway (gateway/api/prepare.py) and the engines' own HTTP
(serving/engine_app.py) both call these, so a request is refused for the same
reason, with the same field named, wherever it arrives.
"""

import time
from dataclasses import dataclass

from pydantic import BaseModel

from serving.grammar import (
    GrammarError,
    SchemaCheck,
    check_grammar,
    llg_tokenizer,
    schema_check,
    schema_for,
    schema_grammar,
)
from serving.openai import tools
from serving.openai.chat_tokenizer import ChatTokenizer
from serving.openai.errors import BadRequest, PromptTooLong
from serving.openai.schemas import ChatCompletionRequest, _GenerationParams


@dataclass(frozen=True)
class ToolPlan:
    format: str  # serving/openai/tools.py FORMATS
    allowed: frozenset[str]  # the functions a call may name
    grammar: str  # "" unless tool_choice forces a call
    single: bool = False  # parallel_tool_calls false: an answer's first call only
    strict: dict[str, SchemaCheck] | None = None  # name -> `strict: true` function's parameters (checked unforced)
    named: bool = False  # tool_choice names the function

    @property
    def calls_finish(self) -> str:
        """The finish reason of an answer whose calls ended it: OpenAI's `stop` where tool_choice named the function
        (the call was asked for, not chosen), `tool_calls` otherwise."""
        return "stop" if self.named else "tool_calls"

    def follows(self, name: str, arguments: str) -> bool:
        check = (self.strict or {}).get(name)
        return check is None or check.follows(arguments)

    def parse(self, text: str, reason: str | None = None) -> tuple[str | None, list]:
        """The answer's text and calls; `reason` the worker's finish reason ("length": cut, maybe mid-call)."""
        return tools.parse(text, self.format, set(self.allowed), self.single, self.follows, reason == "length")

    def streamed(self) -> "tools.StreamedCalls":
        return tools.StreamedCalls(self.format, set(self.allowed), self.single, self.follows, self.calls_finish)


def stops_for(body: _GenerationParams, plan: ToolPlan | None) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The stop strings and token ids the engine applies: none to a forced call. `stop` ends the answer's text, and a
    forced answer is a call, which its grammar ends: `stop: ["\n"]` cut the call's markup after `<tool_call>` and
    returned that as the answer's text, with no call, where tool_choice required one (a review)."""
    if plan is not None and plan.grammar:
        return (), ()
    return body.stop_strings(), tuple(body.stop_token_ids or ())


def answer_logprobs(logprobs, plan: ToolPlan | None, text: str, calls: list) -> dict:
    """The whole answer's log-probabilities (format.Logprobs): where it made calls, those of the text before them
    only (a call's tokens are the model's call syntax, which the answer never shows)."""
    return logprobs.whole(tools.call_start(text, plan.format) if calls else None)


def tool_plan(body: ChatCompletionRequest, chat: ChatTokenizer) -> ToolPlan | None:
    """How the answer's tool calls are read (and forced), None without tools; BadRequest naming the field at fault.
    The gateway and the local agent both call it, off the event loop: a forced call's grammar and each strict
    function's schema are compiled here."""
    if not body.tools or body.tool_choice == "none":
        if body.tool_choice not in (None, "none"):
            raise BadRequest("tool_choice needs tools", param="tool_choice")
        return None
    fmt = chat.tool_format
    try:
        choice = body.tool_choice.model_dump() if isinstance(body.tool_choice, BaseModel) else body.tool_choice
        forced = tools.forced_names(body.tools, choice)
        names = frozenset(tools.functions(body.tools))
        # A forced answer is one call unless the request asks for several in so many words (parallel_tool_calls true)
        grammar = tools.grammar(body.tools, forced, fmt, body.parallel_tool_calls is True) if forced else ""
    except (tools.ToolError, ValueError, RuntimeError) as exc:
        param = "tool_choice" if "tool_choice" in str(exc) else "tools"
        raise BadRequest(f"{param}: {exc}", param=param) from None
    # A forced call follows its schema by grammar: nothing to check after
    strict = {} if forced else _strict_checks(body.tools, chat)
    named = isinstance(choice, dict)
    return ToolPlan(fmt, names, grammar, body.parallel_tool_calls is False, strict, named)


STRICT_COMPILE_BUDGET_S = 2.0  # a request's strict schemas compiled for longer than this are refused


def _strict_checks(listed: list[dict], chat: ChatTokenizer) -> dict[str, SchemaCheck]:
    """Each `strict: true` function's parameters, compiled (once a process: serving.grammar.schema_check). One that
    cannot be compiled is the request's fault: strict promises calls that follow it, which nothing here could check
    (it was loosened to any object, and each call's check compiled it again, on the event loop). So is a set whose
    compiling runs past STRICT_COMPILE_BUDGET_S: 40 nested schemas took a review's gateway 107 s of CPU."""
    strict, tokenizer = tools.strict_schemas(listed), llg_tokenizer(chat.tokenizer, ())
    checks, started = {}, time.monotonic()
    for i, tool in enumerate(listed):
        name = tool["function"]["name"]
        if name in strict and name not in checks:
            if time.monotonic() - started > STRICT_COMPILE_BUDGET_S:
                raise BadRequest(
                    f"tools[{i}]: the strict functions' schemas took over {STRICT_COMPILE_BUDGET_S:g} s to compile; "
                    "send fewer or simpler ones, or drop `strict`",
                    param="tools",
                )
            try:
                checks[name] = schema_check(strict[name], tokenizer)
            except (GrammarError, ValueError, RuntimeError) as exc:
                raise BadRequest(
                    f"tools[{i}].function.parameters: a strict function's schema must compile: {exc}", param="tools"
                ) from None
    return checks


def check_token_ids(body: _GenerationParams, vocab: int) -> None:
    for param, ids in (("logit_bias", body.token_biases()), ("stop_token_ids", body.stop_token_ids or ())):
        if bad := [t for t in ids if t >= vocab]:
            raise BadRequest(f"{param}: token ids out of range [0, {vocab}): {bad[:5]}", param=param)


def max_tokens_within(requested: int | None, num_prompt: int, context: int, default: int, prompt_field: str) -> int:
    """The request's max_tokens, or (where it sets none) `default` within the room the prompt leaves: the gateway's
    and the local agent's alike (a private request of 1,971 tokens without max_tokens was a 400 on the device where
    the gateway answered it, not private: a review). PromptTooLong where the answer cannot fit."""
    room = context - num_prompt
    if requested is None:
        if room < 1:
            raise PromptTooLong.of(context, num_prompt, None, prompt_field)
        return min(default, room)
    if requested > room:  # 0 (completions' echo alone) fits a prompt that fills the context
        raise PromptTooLong.of(context, num_prompt, requested, prompt_field)
    return requested


def shaped(body: _GenerationParams, plan: ToolPlan | None) -> bool:
    """Is there a grammar to make and check (any response_format, checked even when it is text; a forced call)?"""
    return bool(plan is not None and plan.grammar) or body.response_format is not None


def answer_grammar(body: _GenerationParams, plan: ToolPlan | None, chat: ChatTokenizer) -> str:
    """The grammar the answer follows, checked; "" for none. A forced tool call's where a call is forced (OpenAI's
    response_format then shapes a later turn's text, and is checked all the same); with tools the model may call,
    a call or a text answer following response_format; else response_format's. Compiling a large schema takes
    seconds: the gateway and the local agent call this in a worker thread."""
    tokenizer = llg_tokenizer(chat.tokenizer, ())
    try:
        shape = body.grammar()
        if shape:
            check_grammar(shape, tokenizer)
    except (GrammarError, ValueError, RuntimeError) as exc:
        raise BadRequest(f"response_format: {exc}", param="response_format") from None
    if plan is None or not (plan.grammar or shape):
        return shape
    if not plan.grammar:  # any of the tools, or the answer response_format asks for
        return _calls_or_answer(body, plan, tokenizer)
    try:
        check_grammar(plan.grammar, tokenizer)
    except (GrammarError, ValueError, RuntimeError) as exc:
        raise _tool_fault(body.tools, plan.allowed, tokenizer, exc) from None
    return plan.grammar


def _tool_fault(listed: list[dict], names, tokenizer, exc: Exception) -> BadRequest:
    """The tool whose parameters the forced call's grammar could not compile, in llguidance's own words (the call
    grammar's error quotes that whole grammar, prompt syntax and all)."""
    for i, tool in enumerate(listed):
        function = tool["function"]
        if function["name"] in names:
            try:
                check_grammar(schema_grammar(function.get("parameters") or {"type": "object"}), tokenizer)
            except (GrammarError, ValueError, RuntimeError) as fault:
                return BadRequest(f"tools[{i}].function.parameters: {fault}", param="tools")
    return BadRequest(f"tools: {str(exc).splitlines()[0]}", param="tools")


def _calls_or_answer(body: ChatCompletionRequest, plan: ToolPlan, tokenizer) -> str:
    """A call to any of the tools, or the text response_format asks for. A tool the model may call was never held
    to its schema by grammar (a strict one is checked after): where a schema uses what llguidance cannot compile
    (`not`, `if`, `dependentRequired`), its arguments are any object rather than the request a 400."""
    names, parallel, answer = sorted(plan.allowed), not plan.single, schema_for(body.response_format)
    loose = [{**t, "function": {**t["function"], "parameters": {"type": "object"}}} for t in body.tools]
    for attempt in (body.tools, loose):  # tool_plan checked each tool is {"type": "function", "function": {...}}
        try:
            grammar = tools.grammar(attempt, names, plan.format, parallel, answer)
            check_grammar(grammar, tokenizer)
            return grammar
        except (GrammarError, tools.ToolError, ValueError, RuntimeError) as exc:
            error = exc
    raise _tool_fault(body.tools, plan.allowed, tokenizer, error)

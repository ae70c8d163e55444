"""Grammar-constrained decoding with llguidance: structured output on both engines.

The gateway turns OpenAI's `response_format` into an llguidance grammar (`grammar_for`), checks it
against the model's tokenizer, and sends it to the worker as a string. Each engine then keeps one
`Constraint` per sequence: before sampling, `allowed()` is the set of tokens the grammar permits next
(llguidance computes it in Rust, a few microseconds for a small vocabulary); every other token's logit
becomes -inf, for a whole batch in one masked fill (`serving.logits_processors.mask_logits`); after
sampling, `consume(token)` advances the grammar, and a grammar that has ended ends the answer (finish reason "stop").
End-of-sequence is allowed exactly where the grammar may end, so a constrained answer that stops by
itself always parses and, for `json_schema`, validates. An answer cut by `max_tokens` is cut (finish
reason "length"), as OpenAI's is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from contextvars import ContextVar

import llguidance
from tokenizers import Tokenizer

from serving.engine_api import RequestRejected, SamplingParams

log = logging.getLogger(__name__)


class GrammarError(ValueError):
    """The response format cannot be turned into a grammar for this model: the request's fault."""


def grammar_for(response_format: dict) -> str | None:
    """OpenAI's `response_format` as an llguidance grammar; None for plain text."""
    schema = schema_for(response_format)
    return None if schema is None else schema_grammar(schema)


def schema_for(response_format: dict) -> dict | None:
    """The JSON schema OpenAI's `response_format` asks the answer to follow; None for plain text."""
    kind = response_format.get("type")
    if not isinstance(kind, str):
        raise GrammarError(f"type must be text, json_object or json_schema, got {json.dumps(kind)[:40]}")
    allowed = {"text": {"type"}, "json_object": {"type"}, "json_schema": {"type", "json_schema"}}.get(kind, set())
    if extra := sorted(set(response_format) - allowed - {"type"}):
        raise GrammarError(f"unknown key{'s' if len(extra) > 1 else ''} in response_format: {', '.join(extra)}")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise GrammarError("json_schema must be an object with a `schema` object")
        if extra := sorted(set(spec) - {"name", "description", "schema", "strict"}):
            raise GrammarError(f"unknown key in response_format.json_schema: {', '.join(extra)}")
        name = spec.get("name")  # required by OpenAI: a request that passes here passes there
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise GrammarError(
                f"response_format.json_schema.name must be 1 to 64 letters, digits, _ or -, got {json.dumps(name)[:40]}"
            )
        if (mistyped := mistyped_field(spec, "response_format.json_schema")) is not None:
            raise GrammarError(mistyped)
        return spec.get("schema") or {"type": "object"}
    raise GrammarError(f"type must be text, json_object or json_schema, got {kind!r}")


def mistyped_field(spec: dict, where: str) -> str | None:
    """What is wrong with the `description` and `strict` of OpenAI's named schemas (a function, a json_schema
    response format), or None: each a string and true or false where given (`"strict": "false"` is no false)."""
    for key, kind, what in (("description", str, "a string"), ("strict", bool, "true or false")):
        if spec.get(key) is not None and not isinstance(spec[key], kind):
            return f"{where}.{key} must be {what}, got {json.dumps(spec[key])[:40]}"
    return None


def schema_grammar(schema: dict) -> str:
    # Compact JSON, as OpenAI's: free whitespace lets a small model wander in blank lines until max_tokens.
    return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides={"whitespace_flexible": False})


MAX_GRAMMAR_BYTES = 64 * 1024  # a schema this large takes llguidance about half a second to compile
# llguidance's errors without its parser state and grammar (~20 KB: a worker's gRPC status over 16 KiB reached the
# gateway as RESOURCE_EXHAUSTED, a backend failure that opened the breakers; a review), and no warnings on stderr: a
# caller's grammar says why it failed in the answer, not in the gateway's or a worker's log.
_LIMITS = llguidance.LLParserLimits(verbose_errors=False)


def matcher(tokenizer: llguidance.LLTokenizer, grammar: str) -> llguidance.LLMatcher:
    return llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=_LIMITS)


class SchemaCheck:
    """A JSON schema compiled once, against which texts are checked (a strict tool's arguments, any whitespace).
    Compiling is the cost (seconds for a nested schema): build it off the event loop, once per request, where
    compiling it anew for each call an answer made stalled the loop for seconds a call. GrammarError when the schema
    is too large or cannot be compiled."""

    def __init__(self, schema: dict, tokenizer: llguidance.LLTokenizer) -> None:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        self._tokenizer, self._matcher = tokenizer, _compiled(grammar, tokenizer)
        # What the compiled matcher holds, about (measured: ~0.5 MB for any schema, and ~0.5 MB a KB of grammar for
        # integer ranges, the most of the kinds tried): llguidance says nothing of its memory
        self.weight = (512 << 10) + 512 * len(grammar)

    def follows(self, text: str) -> bool:
        matcher = self._matcher.deep_copy()
        ids = self._tokenizer.tokenize_str(text)
        return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting() and not matcher.is_error()


class NotRemembered(LookupError):
    """What a check needs is not remembered yet, and REMEMBERED_ONLY said not to compile it here."""


# Set where a check runs on the event loop first (gateway/api/prepare.py): a remembered outcome answers at once, and a
# compile it would need raises NotRemembered instead, so that it runs in a compiling thread.
REMEMBERED_ONLY: ContextVar[bool] = ContextVar("grammar_remembered_only", default=False)


class _Remembered:
    """What compiling gave (its result, or why it failed), by key, for the last `size` keys and at most `budget`
    bytes of what `weigh` says each result holds: a client sends the same response_format or tools request after
    request, and compiling a nested schema costs a second of CPU. A refusal is remembered too, so repeating it is
    cheap. The budget: a compiled schema of 600 integer ranges holds ~25 MB, and 256 of them took a review's gateway
    to 2.6 GB on its way to 6."""

    def __init__(self, size: int, budget: int | None = None, weigh=None) -> None:
        self._size, self._outcomes, self._lock = size, OrderedDict(), threading.Lock()
        self._budget, self._weigh, self._held = budget, weigh, 0

    def get(self, key: tuple, make):
        """make()'s result, remembered; GrammarError (llguidance's message, cut) when it cannot be made."""
        with self._lock:
            outcome = self._outcomes.get(key)
            if outcome is not None:
                self._outcomes.move_to_end(key)
        if outcome is None:
            if REMEMBERED_ONLY.get():
                raise NotRemembered
            try:
                made = make()
                outcome = (made, None, self._weigh(made) if self._weigh is not None else 0)
            except (GrammarError, ValueError, RuntimeError) as exc:
                outcome = (None, _short(str(exc)), 0)
            self._keep(key, outcome)
        result, problem, _ = outcome
        if problem is not None:
            raise GrammarError(problem)
        return result

    def _keep(self, key: tuple, outcome: tuple) -> None:
        with self._lock:
            if key in self._outcomes:  # another thread made it meanwhile
                return
            self._outcomes[key] = outcome
            self._held += outcome[2]
            while len(self._outcomes) > self._size or (
                self._budget is not None and self._held > self._budget and len(self._outcomes) > 1
            ):
                self._held -= self._outcomes.popitem(last=False)[1][2]

    @property
    def held(self) -> int:
        """The weight of what is remembered, in bytes."""
        return self._held


def _short(problem: str) -> str:
    """llguidance's message, cut: a compile error can quote the whole schema, a Rust panic's backtrace, or the
    parser's whole state (`NoExtensionBias\n<state>…`, a schema that refers to itself without end: a review)."""
    first = problem.split("\nstack backtrace:", 1)[0]
    if "\n<state>" in first or "\n<non-verbose/>" in first:
        first = f"the parser cannot go on with this schema ({first.split(chr(10), 1)[0].strip()[:100]})"
    return first if len(first) <= MAX_PROBLEM_CHARS else first[:MAX_PROBLEM_CHARS] + "…"


MAX_PROBLEM_CHARS = 500
# Whose request a check is for (the gateway sets its tenant): what was compiled is remembered per tenant, so that
# no tenant can time whether another sent a schema (a remembered one answers in microseconds, a compile takes up to
# seconds). Contexts reach the compiling threads (gateway/api/prepare.py's `_compiling` copies them).
CACHE_SCOPE: ContextVar[str] = ContextVar("grammar_cache_scope", default="")
# (scope, id of llguidance's tokenizer, the schema's SHA-256) -> its SchemaCheck, at most ~256 MB of them
_SCHEMAS = _Remembered(256, budget=256 << 20, weigh=lambda check: check.weight)
_GRAMMARS = _Remembered(1024)  # (scope, id of llguidance's tokenizer, the grammar's SHA-256) -> None: it serves


def schema_check(schema: dict, tokenizer: llguidance.LLTokenizer) -> SchemaCheck:
    """The SchemaCheck for this schema, compiled once a process (per CACHE_SCOPE); GrammarError (remembered too)
    when it cannot be."""
    key = (CACHE_SCOPE.get(), id(tokenizer), hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).digest())
    return _SCHEMAS.get(key, lambda: SchemaCheck(schema, tokenizer))


_HOLDS = _Remembered(1024)  # the grammar's SHA-256 -> it can be held (a schema's own: no scope, no tokenizer)


def can_hold(schema: dict) -> bool:
    """Whether answers can be held to `schema` at all (its keywords and patterns are ones llguidance takes), checked
    without a tokenizer, once a process for a schema (the same tools come request after request, and a Responses
    request asks twice: its chat tools and its echo): schema_check's full check comes when it serves."""

    def validated(grammar: str) -> bool:
        if message := llguidance.LLMatcher.validate_grammar(grammar, None):
            raise GrammarError(message)
        return True

    try:
        grammar = schema_grammar(schema)
        return _HOLDS.get(("holds", hashlib.sha256(grammar.encode()).digest()), lambda: validated(grammar))
    except (GrammarError, ValueError, TypeError, RuntimeError):
        return False


def check_grammar(grammar: str, tokenizer: llguidance.LLTokenizer) -> None:
    """Refuse, before any worker sees it, a grammar that will not serve: too large, invalid, too complex for the
    parser (ParserTooComplex shows at the first mask), or one that allows only an empty answer. Seconds of CPU for
    a large schema the first time: call it off the event loop."""
    key = (CACHE_SCOPE.get(), id(tokenizer), hashlib.sha256(grammar.encode()).digest())

    def compile_only() -> None:  # the matcher is not kept: 1,024 of them would hold their parsers
        _compiled(grammar, tokenizer)

    _GRAMMARS.get(key, compile_only)


def _compiled(grammar: str, tokenizer: llguidance.LLTokenizer) -> llguidance.LLMatcher:
    """A matcher for a grammar that will serve; GrammarError saying why one will not."""
    if len(grammar.encode()) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"the schema is too large ({len(grammar.encode())} bytes; at most {MAX_GRAMMAR_BYTES})")
    if message := llguidance.LLMatcher.validate_grammar(grammar, tokenizer, limits=_LIMITS):
        raise GrammarError(message)
    compiled = matcher(tokenizer, grammar)
    compiled.compute_bitmask()
    if compiled.is_error():
        raise GrammarError(compiled.get_error())
    if compiled.is_stopped():
        raise GrammarError("the schema allows only an empty answer")
    _walk_forced(compiled.deep_copy())
    return compiled


FORCED_STEPS = 16  # masks past the first that a check computes, along the tokens the grammar forces


def _walk_forced(walker: llguidance.LLMatcher) -> None:
    """Follow the tokens the grammar forces (`{"` of an object with required keys) and compute the mask after each:
    a grammar too complex for the parser often shows only there (an object of 700 properties: the row after `{` holds
    2,799 items, over llguidance's 2,000), and every answer would fail on its first tokens, on a worker."""
    for _ in range(FORCED_STEPS):
        forced = walker.compute_ff_tokens()
        if not forced or walker.is_error():
            break
        walker.consume_tokens(forced)
        walker.compute_bitmask()
    if walker.is_error():
        raise GrammarError(walker.get_error())


# (id of the tokenizer, eos ids) -> (the tokenizer, kept so its id is not reused; llguidance's). A process holds
# one or two tokenizers for its life; keying on the object spares serializing it (megabytes) per request.
_LLG_TOKENIZERS: dict[tuple[int, tuple[int, ...]], tuple[Tokenizer, llguidance.LLTokenizer]] = {}
_LLG_LOCK = threading.Lock()


def llg_tokenizer(tokenizer: Tokenizer, eos_token_ids) -> llguidance.LLTokenizer:
    """The tokenizer as llguidance reads it (built once per tokenizer and end-of-sequence ids)."""
    key = (id(tokenizer), tuple(sorted(eos_token_ids)))
    with _LLG_LOCK:
        if key not in _LLG_TOKENIZERS:
            built = llguidance.LLTokenizer(tokenizer.to_str(), eos_token=list(key[1]) or None)
            _LLG_TOKENIZERS[key] = (tokenizer, built)
        return _LLG_TOKENIZERS[key][1]


GRAMMAR_FAILED = "response_format: the grammar failed mid-answer"


def refused(message: str, forced_call: bool) -> tuple[str, str | None]:
    """An engine's refusal as the gateway and the local agent both say it: (message, the request field it names).
    A grammar that failed mid-answer names `response_format`, or `tools` where the grammar was a forced tool call's
    (`forced_call`: the engines know only the grammar; it was said to be response_format's, a review)."""
    if not message.startswith("response_format:"):
        return message, None
    if forced_call:
        return f"tools: the forced tool call's arguments:{message.removeprefix('response_format:')}", "tools"
    return message, "response_format"


def constraint_for(params: SamplingParams, tokenizer: Tokenizer, eos_token_ids) -> Constraint | None:
    """The sequence's constraint, None without a grammar; a grammar that will not compile is the request's fault."""
    if not params.grammar:
        return None
    try:
        return Constraint(llg_tokenizer(tokenizer, eos_token_ids), params.grammar)
    except (ValueError, RuntimeError) as exc:
        raise RequestRejected(f"grammar: {exc}") from None


class Constraint:
    """One sequence's grammar state."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str) -> None:
        self._matcher = matcher(tokenizer, grammar)
        if self._matcher.is_error():
            raise GrammarError(_short(self._matcher.get_error()))

    def bitmask(self) -> bytes:
        """The tokens the grammar permits next, one bit each (token t: bit t % 32 of 32-bit word t // 32)."""
        return self._matcher.compute_bitmask()

    def consume(self, token: int) -> None:
        if not self._matcher.consume_token(token) or self._matcher.is_error():
            log.warning("grammar refused token %d: %s", token, _short(self._matcher.get_error()))

    def failure(self) -> RequestRejected | None:
        """The request's failure where the parser gave up (computing a mask or on a token), None while it can go on.
        Read before a token ends the answer: a mask that failed allows end-of-sequence alone, and the answer, cut,
        would read as one that ended by itself (a review)."""
        if not self._matcher.is_error():
            return None
        return RequestRejected(f"{GRAMMAR_FAILED}: {_short(self._matcher.get_error())}")

    @property
    def done(self) -> bool:
        """The grammar has ended: no token may follow."""
        return self._matcher.is_stopped()

"""Structured output: on both engines, an answer under a JSON schema parses and validates (llguidance's grammar)."""

import asyncio
import json

import jsonschema
import pytest

from serving.engine_api import GenerationRequest, RequestRejected, SamplingParams
from serving.grammar import GrammarError, grammar_for

PROMPT = (1, 309, 201, 428, 309, 57, 88, 201)
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "kind": {"enum": ["cloud", "edge"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    },
    "required": ["name", "age", "kind", "tags"],
    "additionalProperties": False,
}


async def answer(engine, params: SamplingParams, name: str = "r"):
    text, last = "", None
    async for chunk in engine.generate(GenerationRequest(name, PROMPT, params)):
        text, last = text + chunk.text, chunk
    return text, last.finish_reason


def test_every_answer_under_a_schema_parses_and_validates(engine):
    grammar = grammar_for({"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}})
    runs = [SamplingParams(max_tokens=200, temperature=0, grammar=grammar)]
    runs += [SamplingParams(max_tokens=200, temperature=1.0, seed=seed, grammar=grammar) for seed in range(6)]

    async def all_at_once():  # batched on the cloud engine, with an unconstrained request among them
        free = SamplingParams(max_tokens=20, temperature=1.0, seed=1, ignore_eos=True)
        return await asyncio.gather(*(answer(engine, p, f"r{i}") for i, p in enumerate([*runs, free])))

    *constrained, (free_text, _) = asyncio.run(all_at_once())
    for text, reason in constrained:
        assert reason == "stop", text
        jsonschema.validate(json.loads(text), SCHEMA)
    with pytest.raises(ValueError):
        json.loads(free_text)  # the unconstrained neighbour is not bent into JSON


def test_json_object_is_any_object(engine):
    grammar = grammar_for({"type": "json_object"})
    text, reason = asyncio.run(answer(engine, SamplingParams(max_tokens=300, temperature=0, grammar=grammar)))
    assert reason == "stop" and isinstance(json.loads(text), dict), text


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "xml"},
        {"type": "json_schema", "json_schema": []},
        {"type": "json_schema", "json_schema": {"schema": 3}},
        # as OpenAI: a name of its own letters, and a strict flag that is one (a request passing here passes there)
        {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
        {"type": "json_schema", "json_schema": {"name": "a b/c", "schema": {"type": "object"}}},
        {"type": "json_schema", "json_schema": {"name": "x" * 65, "schema": {"type": "object"}}},
        {"type": "json_schema", "json_schema": {"name": "x", "strict": "false", "schema": {"type": "object"}}},
    ],
)
def test_a_response_format_that_is_not_one_is_refused(response_format):
    with pytest.raises(GrammarError):
        grammar_for(response_format)


def test_a_grammar_that_will_not_compile_is_the_requests_fault(engine):
    with pytest.raises(RequestRejected):
        asyncio.run(answer(engine, SamplingParams(max_tokens=4, grammar="{not a grammar")))


def counting_compiles(monkeypatch) -> list:
    """llguidance's matcher, counting how many grammars are looked at (one entry each) in the list returned."""
    import llguidance

    real, made = llguidance.LLMatcher, []

    class Counting:
        @staticmethod
        def validate_grammar(*args, **kwargs):
            made.append(1)
            return real.validate_grammar(*args, **kwargs)

        def __new__(cls, *args, **kwargs):
            return real(*args, **kwargs)

    monkeypatch.setattr(llguidance, "LLMatcher", Counting)
    return made


def test_a_grammar_is_compiled_once_whether_it_serves_or_not(demo_checkpoint, monkeypatch):
    """Clients send the same response_format request after request, and a nested schema costs the gateway a second
    of CPU to compile (a refused one too): each is compiled once, and its answer, refusal included, remembered."""

    from serving.checkpoint import load_tokenizer
    from serving.grammar import check_grammar, llg_tokenizer

    tokenizer = llg_tokenizer(load_tokenizer(demo_checkpoint), ())
    good = grammar_for({"type": "json_schema", "json_schema": {"name": "good", "schema": {"type": "object", "properties": {
        "once": {"type": "integer"}}}}})  # fmt: skip
    broken = grammar_for({"type": "json_schema", "json_schema": {"name": "broken", "schema": {"$ref": "#/$defs/once"}}})
    made = counting_compiles(monkeypatch)
    for grammar in (good, broken):
        outcomes = []
        for _ in range(3):
            try:
                check_grammar(grammar, tokenizer)
                outcomes.append(None)
            except GrammarError as exc:
                outcomes.append(str(exc))
        assert len(set(outcomes)) == 1 and (outcomes[0] is None) == (grammar is good), outcomes
    assert len(made) == 2  # once each


def test_what_one_tenant_compiled_is_not_remembered_for_another(demo_checkpoint, monkeypatch):
    """A remembered check answers in microseconds, a compile takes up to seconds: shared between tenants, one could
    time whether another had sent a schema. The gateway sets each request's tenant as the scope (prepare.py)."""
    import contextvars

    from serving.checkpoint import load_tokenizer
    from serving.grammar import CACHE_SCOPE, check_grammar, llg_tokenizer

    tokenizer = llg_tokenizer(load_tokenizer(demo_checkpoint), ())
    grammar = grammar_for({"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "object", "properties": {
        "tenant_scoped": {"type": "integer"}}}}})  # fmt: skip
    made = counting_compiles(monkeypatch)

    def check_for(tenant: str) -> int:
        before = len(made)

        def check():  # in a context of its own, as each request's task has
            CACHE_SCOPE.set(tenant)
            check_grammar(grammar, tokenizer)

        contextvars.copy_context().run(check)
        return len(made) - before

    assert [check_for("acme"), check_for("acme"), check_for("globex"), check_for("acme")] == [1, 0, 1, 0]


# An object of 700 properties: llguidance's row after `{` holds 2,799 items, over its 2,000; the first mask is fine
WIDE = {
    "type": "object",
    "properties": {f"p{i}": {"type": "integer"} for i in range(700)},
    "additionalProperties": False,
}


def test_a_schema_the_parser_gives_up_on_at_its_first_tokens_is_refused_before_any_worker(demo_checkpoint):
    """(a review) The check computed the first mask only: a schema that failed one token later passed it, and every
    answer failed on the worker, whose error the gateway took for the backend's (three requests opened the breakers
    of both backends). The check follows the tokens the grammar forces, and its message carries no parser state."""
    from serving.checkpoint import load_tokenizer
    from serving.grammar import check_grammar, llg_tokenizer, schema_grammar

    tokenizer = llg_tokenizer(load_tokenizer(demo_checkpoint), ())
    with pytest.raises(GrammarError, match="cannot go on|max is 2000") as refused:
        check_grammar(schema_grammar(WIDE), tokenizer)
    assert len(str(refused.value)) < 300 and "<state>" not in str(refused.value)
    narrow = WIDE | {"properties": {f"p{i}": {"type": "integer"} for i in range(100)}}
    check_grammar(schema_grammar(narrow), tokenizer)  # served


def test_a_grammar_that_fails_mid_answer_fails_the_request_and_never_ends_the_answer(engine):
    """(a review) Past a choice (`a`: x or y) the forced walk stops, so this schema passes the gateway's check, and
    the parser gives up later, computing a mask, which then allows end-of-sequence alone: the engines read that token
    as the answer's end, `{"a":"x","b":{` with finish reason "stop", where the promise is an answer that parses."""
    schema = {"type": "object", "properties": {"a": {"enum": ["x", "y"]}, "b": WIDE}, "required": ["a", "b"]}
    grammar = grammar_for({"type": "json_schema", "json_schema": {"name": "late", "schema": schema}})
    with pytest.raises(RequestRejected, match="response_format: the grammar failed mid-answer") as failed:
        asyncio.run(answer(engine, SamplingParams(max_tokens=200, temperature=0, grammar=grammar)))
    assert len(str(failed.value)) < 400 and "<state>" not in str(failed.value)


def test_what_is_remembered_is_held_to_a_budget_of_bytes():
    """(a review) 256 compiled schemas of ~25 MB each took the gateway past 2.6 GB: the oldest go once the weights
    of what is kept pass the budget."""
    from serving.grammar import _Remembered

    kept = _Remembered(256, budget=100, weigh=len)
    for i in range(10):
        kept.get((i,), lambda i=i: "x" * 30)
    assert kept.held == 90  # three of 30 bytes: the fourth would pass 100
    made = []
    kept.get((9,), lambda: made.append(1) or "x")  # the newest is still there
    kept.get((0,), lambda: made.append(1) or "x" * 30)  # the oldest was let go: made again
    assert made == [1]


def test_an_answer_whose_parser_gave_up_computing_a_mask_is_no_answer(engine):
    """(a review) llguidance's lexer gives up on this pattern after some 50-90 tokens, computing the next mask, which
    then allows end-of-sequence alone: the engines took that for the answer's end (an unclosed string, finish reason
    "stop"). An answer that stops by itself parses; one whose parser gave up is the request's failure."""
    pattern = {"type": "string", "pattern": "^(.{1,50}[aeiou]){1,50}$"}
    schema = {"type": "object", "properties": {"s": pattern}, "required": ["s"], "additionalProperties": False}
    grammar = grammar_for({"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    failed = 0
    for seed in range(4):
        params = SamplingParams(max_tokens=300, temperature=1.0, seed=seed, grammar=grammar)
        try:
            text, reason = asyncio.run(answer(engine, params, f"s{seed}"))
        except RequestRejected as exc:
            assert "the grammar failed mid-answer" in str(exc) and len(str(exc)) < 400
            failed += 1
            continue
        if reason == "stop":
            jsonschema.validate(json.loads(text), schema)
    assert failed  # the parser gave up on some

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
    ],
)
def test_a_response_format_that_is_not_one_is_refused(response_format):
    with pytest.raises(GrammarError):
        grammar_for(response_format)


def test_a_grammar_that_will_not_compile_is_the_requests_fault(engine):
    with pytest.raises(RequestRejected):
        asyncio.run(answer(engine, SamplingParams(max_tokens=4, grammar="{not a grammar")))

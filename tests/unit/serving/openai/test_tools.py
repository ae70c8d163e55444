"""Tool calls out of model text, in each format, whole and streamed; forced calls by grammar on both engines."""

import asyncio
import json

import jsonschema
import pytest

from serving.engine_api import GenerationRequest, SamplingParams
from serving.openai import tools

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ALLOWED = {"get_weather", "get_time"}

ANSWERS = {
    "hermes": 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n'
    '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
    "mistral": 'Let me look.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}, '
    '{"name": "get_time", "arguments": {}}]',
    "llama3_json": '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}; '
    '{"name": "get_time", "parameters": {}}',
}
# The text before the calls, as the model wrote it (a stream sends it before it can know a call follows)
BEFORE_CALLS = {"hermes": "Let me look.\n", "mistral": "Let me look.", "llama3_json": None}


@pytest.mark.parametrize("fmt", tools.FORMATS)
def test_each_format_gives_the_calls_and_the_text_around_them(fmt):
    content, calls = tools.parse(ANSWERS[fmt], fmt, ALLOWED)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"}),
        ("get_time", {}),
    ]
    assert content == BEFORE_CALLS[fmt]
    assert len({c.id for c in calls}) == 2
    assert calls[0].arguments == '{"city":"Paris","unit":"c"}'  # compact, as OpenAI's, whatever the model spaced


@pytest.mark.parametrize("fmt", tools.FORMATS)
@pytest.mark.parametrize("piece", [1, 3, 7])
def test_streamed_answers_hold_back_only_what_may_be_a_call(fmt, piece):
    answer = ANSWERS[fmt]
    held = tools.StreamedCalls(fmt, ALLOWED)
    sent = "".join(held.push(answer[i : i + piece]) for i in range(0, len(answer), piece))
    rest, calls = held.finish()
    assert sent + rest == (tools.parse(answer, fmt, ALLOWED)[0] or "")  # (a review: the whole was stripped)
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    plain = tools.StreamedCalls(fmt, ALLOWED)
    text = "No call here, just text <tool and [TOOL and {braces}."
    out = "".join(plain.push(text[i : i + piece]) for i in range(0, len(text), piece))
    rest, calls = plain.finish()
    assert out + rest == text and not calls


@pytest.mark.parametrize("fmt", tools.FORMATS)
@pytest.mark.parametrize("piece", [1, 3, 7])
def test_streamed_log_probabilities_leave_with_their_text_and_a_calls_never_do(fmt, piece):
    """Each piece of the answer comes with an entry naming it (as a token would): the entries sent are those of
    the text sent, less a piece that holds a call's start too, and the calls' (the model's call syntax) are
    dropped; with no call, every entry is sent."""
    for answer, has_calls in ((ANSWERS[fmt], True), ("Plain words <tool and [TOOL, no call.", False)):
        held = tools.StreamedCalls(fmt, ALLOWED)
        sent_text, sent_entries = "", []
        for i in range(0, len(answer), piece):
            sent_text += held.push(answer[i : i + piece])
            these = held.logprobs({"content": [{"token": answer[i : i + piece]}], "refusal": None})
            sent_entries += these["content"] if these else []
        rest, calls = held.finish()
        rest_entries = held.rest_logprobs(calls)
        sent_entries += rest_entries["content"] if rest_entries else []
        said = "".join(e["token"] for e in sent_entries)
        assert bool(calls) == has_calls
        if has_calls:
            assert sent_text.startswith(said) and len(sent_text) - len(said) < piece, (said, sent_text)
            assert "get_weather" not in said
        else:
            assert said == answer == sent_text + rest


@pytest.mark.parametrize("fmt", tools.FORMATS)
@pytest.mark.parametrize("piece", [1, 5, 1000])
def test_an_answer_cut_inside_its_calls_gives_the_calls_made_so_far_and_no_call_syntax(fmt, piece):
    """OpenAI's reading of a call max_tokens cut: a call with its arguments as far as they got, finish_reason
    "length"; the complete calls before it are calls, and the model's call syntax never reaches the client."""
    answer = ANSWERS[fmt]
    cut = answer[: answer.rindex('"get_time"') + len('"get_time", "arguments": {') + (fmt == "llama3_json")]
    whole_first = ("get_weather", '{"city":"Paris","unit":"c"}')
    content, calls = tools.parse(cut, fmt, ALLOWED, cut=True)
    assert [(c.name, c.arguments) for c in calls] == [whole_first, ("get_time", "{")]
    assert content == BEFORE_CALLS[fmt]
    held = tools.StreamedCalls(fmt, ALLOWED)
    sent = "".join(held.push(cut[i : i + piece]) for i in range(0, len(cut), piece))
    rest, streamed = held.finish("length")
    assert [(c.name, c.arguments) for c in streamed] == [whole_first, ("get_time", "{")]
    assert not any(marker in sent + rest for marker in ("<tool_call>", "[TOOL_CALLS]", '"name"'))
    # cut before the name is whole, or inside the marker: no call, and no syntax either
    early = answer[: answer.index('"get_weather"') + 4]
    assert tools.parse(early, fmt, ALLOWED, cut=True) == (BEFORE_CALLS[fmt], [])
    if fmt != "llama3_json":
        in_marker = answer[: answer.index(tools.markers(fmt)[0]) + 4]
        assert tools.parse(in_marker, fmt, ALLOWED, cut=True) == (BEFORE_CALLS[fmt], [])
        held = tools.StreamedCalls(fmt, ALLOWED)
        assert held.push(in_marker) == BEFORE_CALLS[fmt] and held.finish("length") == ("", [])
    # an answer that stopped by itself with a broken call keeps its text, as before
    assert tools.parse(cut, fmt, ALLOWED) == (cut, [])


def test_words_between_calls_of_a_cut_answer_stay_its_text():
    answer = (
        'Sure.<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call> and then '
        '<tool_call>\n{"name": "get_weather", "arguments": {"ci'
    )
    content, calls = tools.parse(answer, "hermes", ALLOWED, cut=True)
    assert content == "Sure.\nand then" and [(c.name, c.arguments) for c in calls] == [
        ("get_time", "{}"),
        ("get_weather", '{"ci'),
    ]


SAME = "the answer as it is"


@pytest.mark.parametrize(
    ("fmt", "answer", "content", "calls"),
    [
        ("hermes", "Wrap a call in <tool_call> tags, then the JSON", SAME, []),  # prose naming the marker
        ("hermes", 'Hi <tool_call>{"name": "rm", "arguments": {}}</tool_call> and', SAME, []),  # not one of the tools
        ("mistral", "The marker [TOOL_CALLS] comes before calls, as", SAME, []),
        ("llama3_json", '{"name": "Bob", "age": 3, "bio": "a long bio that got cu', SAME, []),  # a JSON answer
        ("llama3_json", '{"na', SAME, []),
        ("hermes", '<tool_call>\n{"arguments": {"city": "P"}, "name": "get_weather"', SAME, []),  # keys the other way
        ("hermes", '<tool_call>\n{"name": "C:\\x", "arguments": {"a', SAME, []),  # a name JSON cannot read: no 500
        ("llama3_json", '{"name": "\\q", "parameters": {"a', SAME, []),
        ("hermes", "I think 3 <", SAME, []),  # a lone "<" is text
        ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "P"}}\n</tool_', None,
         [("get_weather", '{"city":"P"}')]),
        ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "P"}}\n</tool_call>\n<tool_', None,
         [("get_weather", '{"city":"P"}')]),
        ("hermes", '<tool_call>\n{"name": "get_we', None, []),  # cut in the name: syntax, and no call
        ("hermes", '<tool_call>\n{"name": "get_weather", "argu', None, [("get_weather", "")]),
    ],
)  # fmt: skip
def test_what_a_cut_answer_is_whole_and_streamed(fmt, answer, content, calls):
    """Text that is no call to one of the tools stays text; the model's call syntax never does."""
    expected = answer if content is SAME else content
    got, made = tools.parse(answer, fmt, ALLOWED, cut=True)
    assert (got, [(c.name, c.arguments) for c in made]) == (expected, calls)
    held = tools.StreamedCalls(fmt, ALLOWED)
    sent = "".join(held.push(answer[i : i + 3]) for i in range(0, len(answer), 3))
    rest, streamed = held.finish("length")
    assert ((sent + rest) or None, [(c.name, c.arguments) for c in streamed]) == (expected, calls)


@pytest.mark.parametrize("fmt", tools.FORMATS)
def test_calls_or_a_shaped_answer_compile_in_every_format(fmt, demo_checkpoint):
    from serving.checkpoint import load_tokenizer
    from serving.grammar import check_grammar, llg_tokenizer

    llg = llg_tokenizer(load_tokenizer(demo_checkpoint), ())
    for parallel in (True, False):
        check_grammar(tools.grammar([WEATHER, TIME], sorted(ALLOWED), fmt, parallel, {"type": "object"}), llg)


def test_cut_text_that_is_no_call_stays_text():
    for fmt in tools.FORMATS:
        assert tools.parse('{"answer": "cut he', fmt, ALLOWED, cut=True) == ('{"answer": "cut he', [])
        assert tools.parse("Plain words, cut", fmt, ALLOWED, cut=True) == ("Plain words, cut", [])


@pytest.mark.parametrize(
    "answer",
    [
        '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>',  # not one of the tools
        '<tool_call>\n{"name": "get_time", "arguments": {"a": 1\n</tool_call>',  # broken JSON
        "<tool_call>",
    ],
)
def test_what_is_not_a_call_to_one_of_the_tools_stays_text(answer):
    assert tools.parse(answer, "hermes", ALLOWED) == (answer, [])


@pytest.mark.parametrize(
    ("tool_list", "choice"),
    [
        ([{"type": "function"}], "auto"),
        ([{"type": "function", "function": {"name": "bad name!"}}], "auto"),
        ([WEATHER], {"type": "function", "function": {"name": "nope"}}),
        ([WEATHER], "sometimes"),
        # an API review: arguments that are no object (a forced call came back as the model's call syntax), and
        # types taken by their truth (`"false"` was strict)
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}], "required"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}], "auto"),
        ([{"type": "function", "function": {"name": "f", "strict": "false"}}], "auto"),
        ([{"type": "function", "function": {"name": "f", "description": 5}}], "auto"),
    ],
)
def test_bad_tools_or_choices_are_the_requests_fault(tool_list, choice):
    with pytest.raises(tools.ToolError):
        tools.forced_names(tool_list, choice)


def test_the_template_fallback_and_inlined_calls_are_in_the_models_format():
    prompt = tools.system_prompt([WEATHER], "hermes")
    assert "<tool_call>" in prompt and "get_weather" in prompt
    calls = [{"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]
    (message,) = tools.inline_calls(
        tools.template_messages([{"role": "assistant", "content": None, "tool_calls": calls}]), "hermes"
    )
    assert message["content"] == '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'


@pytest.mark.parametrize("fmt", tools.FORMATS)
def test_a_forced_call_is_a_valid_call_on_both_engines(engine, fmt):
    names = tools.forced_names([WEATHER, TIME], {"type": "function", "function": {"name": "get_weather"}})
    grammar = tools.grammar([WEATHER, TIME], names, fmt, parallel=False)

    async def answer(seed):
        params = SamplingParams(max_tokens=120, temperature=1.0, seed=seed, grammar=grammar)
        text, last = "", None
        async for chunk in engine.generate(GenerationRequest(f"r{seed}", (1, 309, 201, 428), params)):
            text, last = text + chunk.text, chunk
        return text, last.finish_reason

    for text, reason in asyncio.run(_gather(answer, range(4))):
        assert reason == "stop", text
        content, calls = tools.parse(text, fmt, ALLOWED)
        assert [c.name for c in calls] == ["get_weather"] and not content
        jsonschema.validate(json.loads(calls[0].arguments), WEATHER["function"]["parameters"])


def test_null_parameters_and_description_are_not_given():
    """go-openai sends `"parameters": null` for a function without arguments (its field has no omitempty)."""
    now = {"type": "function", "function": {"name": "now", "parameters": None, "description": None, "strict": None}}
    assert tools.forced_names([now], "required") == ["now"]


def test_a_function_without_parameters_is_called_with_none(engine):
    """OpenAI: omitting `parameters` defines a function with an empty parameter list, so its arguments are {}."""
    ping = {"type": "function", "function": {"name": "ping", "description": "are you there"}}
    grammar = tools.grammar([ping], ["ping"], "hermes", parallel=False)

    async def answer(seed):
        params = SamplingParams(max_tokens=60, temperature=1.0, seed=seed, grammar=grammar)
        text = ""
        async for chunk in engine.generate(GenerationRequest(f"p{seed}", (1, 309, 201, 428), params)):
            text += chunk.text
        return text

    for text in asyncio.run(_gather(answer, range(3))):
        _, calls = tools.parse(text, "hermes", {"ping"})
        assert [(c.name, json.loads(c.arguments)) for c in calls] == [("ping", {})], text


async def _gather(fn, seeds):
    return await asyncio.gather(*(fn(s) for s in seeds))


NESTED = {  # what pydantic writes for a nested model: $defs and a $ref
    "type": "function",
    "function": {
        "name": "book",
        "parameters": {
            "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                                "required": ["city"], "additionalProperties": False}},
            "type": "object",
            "properties": {"to": {"$ref": "#/$defs/Place"}, "seats": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["to", "seats"],
            "additionalProperties": False,
        },
    },
}  # fmt: skip


def test_a_forced_call_to_a_function_with_nested_models_follows_its_schema(engine):
    grammar = tools.grammar([NESTED, WEATHER], ["book"], "hermes", parallel=False)
    params = SamplingParams(max_tokens=150, temperature=1.0, seed=5, grammar=grammar)

    async def answer():
        return "".join([c.text async for c in engine.generate(GenerationRequest("n", (1, 309, 201), params))])

    _, calls = tools.parse(asyncio.run(answer()), "hermes", {"book"})
    jsonschema.validate(json.loads(calls[0].arguments), NESTED["function"]["parameters"])


def test_parallel_tool_calls_false_keeps_the_first_call():
    _, calls = tools.parse(ANSWERS["hermes"], "hermes", ALLOWED, single=True)
    assert [c.name for c in calls] == ["get_weather"]


def test_a_strict_functions_call_that_does_not_follow_its_schema_stays_text(demo_checkpoint):
    from serving.checkpoint import load_tokenizer
    from serving.grammar import SchemaCheck, llg_tokenizer

    llg = llg_tokenizer(load_tokenizer(demo_checkpoint), ())
    strict = {"get_weather": SchemaCheck(WEATHER["function"]["parameters"], llg)}

    def follows(name, arguments):
        return name not in strict or strict[name].follows(arguments)

    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin"}}\n</tool_call>'
    assert [c.name for c in tools.parse(good, "hermes", ALLOWED, follows=follows)[1]] == ["get_weather"]
    assert tools.parse(bad, "hermes", ALLOWED, follows=follows) == (bad, [])
    cut_after_bad = bad + '<tool_call>\n{"name": "get_time", "arguments": {"'  # cut: still no schema-less call
    assert tools.parse(cut_after_bad, "hermes", ALLOWED, follows=follows, cut=True) == (cut_after_bad, [])
    assert tools.strict_schemas([WEATHER, {**TIME, "function": {**TIME["function"], "strict": True}}]) == {
        "get_time": TIME["function"]["parameters"]
    }


def test_a_tool_schema_llguidance_cannot_compile_loosens_beside_a_response_format(demo_checkpoint):
    """Tools the model may call were never held to their schemas by grammar: one using dependentRequired (which
    llguidance lacks) is any object in the call-or-answer grammar, not a 400 for the request."""
    from serving.openai.answer import answer_grammar, tool_plan
    from serving.openai.chat_tokenizer import ChatTokenizer
    from serving.openai.schemas import ChatCompletionRequest

    odd = {"type": "object", "properties": {"a": {"type": "integer"}}, "dependentRequired": {"a": ["b"]}}
    body = ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "f", "parameters": odd}}],
        response_format={"type": "json_object"},
    )
    chat = ChatTokenizer(demo_checkpoint)
    assert "tool_calls_" in answer_grammar(body, tool_plan(body, chat), chat)


def test_a_strict_schema_is_compiled_once_a_request_and_one_that_cannot_be_is_refused(demo_checkpoint, monkeypatch):
    """Each call an answer made compiled its strict function's schema again, on the event loop (seconds a call for
    a nested schema, n choices times); and a schema that could not compile was loosened, so strict promised nothing."""
    import llguidance

    from serving.openai.answer import tool_plan
    from serving.openai.chat_tokenizer import ChatTokenizer
    from serving.openai.errors import BadRequest
    from serving.openai.schemas import ChatCompletionRequest

    real, made = llguidance.LLMatcher, []

    class Counting:  # llguidance's matcher, counting how many are compiled
        grammar_from_json_schema = staticmethod(real.grammar_from_json_schema)
        validate_grammar = staticmethod(real.validate_grammar)

        def __init__(self, *args, **kwargs):
            made.append(1)
            self._matcher = real(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._matcher, name)

    monkeypatch.setattr(llguidance, "LLMatcher", Counting)
    chat = ChatTokenizer(demo_checkpoint)
    strict = {**WEATHER, "function": {**WEATHER["function"], "strict": True}}
    body = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=[TIME, strict])
    plan = tool_plan(body, chat)
    compiled = len(made)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "%s"}}\n</tool_call>\n'
    assert [c.name for c in plan.parse((call % "c") * 3)[1]] == ["get_weather"] * 3
    assert plan.parse(call % "kelvin") == (call % "kelvin", [])  # off its schema: text
    assert len(made) == compiled  # four checks, no compile
    odd = {**strict, "function": {**strict["function"], "parameters": {"type": "object", "not": {"required": ["a"]}}}}
    body = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=[TIME, odd])
    with pytest.raises(BadRequest) as err:
        tool_plan(body, chat)
    assert err.value.param == "tools" and err.value.message.startswith("tools[1].function.parameters: ")


def test_strict_schemas_are_remembered_across_requests_and_their_compiling_is_bounded(demo_checkpoint, monkeypatch):
    """A review sent 40 nested strict schemas a request: 107 s of the gateway's CPU, each request anew. A schema
    is compiled once a process; a forced call (held to its schema by grammar) compiles none; and a request whose
    strict schemas take over the budget is refused."""
    import llguidance

    from serving.openai import answer
    from serving.openai.chat_tokenizer import ChatTokenizer
    from serving.openai.errors import BadRequest
    from serving.openai.schemas import ChatCompletionRequest

    chat = ChatTokenizer(demo_checkpoint)
    schema = {"type": "object", "properties": {"remembered": {"type": "integer"}}}
    strict = {"type": "function", "function": {"name": "g", "parameters": schema, "strict": True}}
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [TIME, strict]}
    answer.tool_plan(ChatCompletionRequest(**ask), chat)
    real, made = llguidance.LLMatcher, []

    class Counting:
        grammar_from_json_schema = staticmethod(real.grammar_from_json_schema)
        grammar_from_lark = staticmethod(real.grammar_from_lark)
        validate_grammar = staticmethod(real.validate_grammar)

        def __new__(cls, *args):
            made.append(1)
            return real(*args)

    monkeypatch.setattr(llguidance, "LLMatcher", Counting)
    again = answer.tool_plan(ChatCompletionRequest(**ask), chat)
    forced = answer.tool_plan(ChatCompletionRequest(**ask, tool_choice="required"), chat)
    assert "g" in again.strict and not forced.strict and made == []  # remembered; forced: by grammar
    monkeypatch.setattr(answer, "STRICT_COMPILE_BUDGET_S", -1.0)
    with pytest.raises(BadRequest, match=r"tools\[1\]: the strict functions' schemas took over"):
        answer.tool_plan(ChatCompletionRequest(**ask), chat)


CALL = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'


@pytest.mark.parametrize(
    ("answer", "reason", "text"),
    [
        (f"Sure!\n{CALL}", "stop", "Sure!\n"),
        (f"a {CALL} b {CALL} c", "stop", "a b  c"),
        (f"Sure.{CALL} and then {CALL}", "stop", "Sure.\nand then"),
        ("text <tool_c", "length", "text "),
    ],
)
@pytest.mark.parametrize("piece", [1, 4, 1000])
def test_a_whole_answer_has_the_text_its_stream_has(answer, reason, text, piece):
    """(a review) The whole answer was stripped at its ends, the stream could not take back what it had sent:
    `Sure!` against `Sure!\\n`, `a  b  c` against `a b  c`."""
    whole, _ = tools.parse(answer, "hermes", ALLOWED, cut=reason == "length")
    held = tools.StreamedCalls("hermes", ALLOWED)
    sent = "".join(held.push(answer[i : i + piece]) for i in range(0, len(answer), piece))
    rest, _ = held.finish(reason)
    assert whole == sent + rest == text

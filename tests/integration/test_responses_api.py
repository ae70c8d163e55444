"""OpenAI's Responses API (`/v1/responses`) with real processes, driven by the official openai client: its types
parse every response and event, and its stream helper assembles the events as it does OpenAI's."""

import json

import jsonschema
import openai
import pytest

from tests.stack import start_stack

pytestmark = pytest.mark.integration
MODEL = "tandem-demo"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "the weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.fixture(scope="module")
def stack(demo_checkpoint, tmp_path_factory):
    s = start_stack(demo_checkpoint, tmp_path_factory.mktemp("stack"))
    yield s
    s.stop()


@pytest.fixture
def client(stack):
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0)


def test_a_response_is_the_chat_answer_to_the_same_turns(client):
    response = client.responses.create(
        model=MODEL, instructions="Answer briefly.", input="Tell me about the gateway", max_output_tokens=12,
        temperature=0,
    )  # fmt: skip
    chat = client.chat.completions.create(
        model=MODEL, max_tokens=12, temperature=0,
        messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Tell me about the gateway"}],
    )  # fmt: skip
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.output_text == chat.choices[0].message.content and response.output_text
    assert (response.usage.input_tokens, response.usage.output_tokens) == (chat.usage.prompt_tokens, 12)
    assert response.usage.total_tokens == response.usage.input_tokens + 12
    # cut by max_output_tokens, as OpenAI says it: incomplete, and why
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert [(item.type, item.role, item.status) for item in response.output] == [("message", "assistant", "incomplete")]
    assert response.instructions == "Answer briefly." and response.max_output_tokens == 12 and response.tools == []


def test_input_items_and_an_earlier_output_given_back_are_the_turns(client):
    first = client.responses.create(model=MODEL, input="Tell me about the gateway", max_output_tokens=6, temperature=0)
    turns = [{"role": "user", "content": [{"type": "input_text", "text": "Tell me about the gateway"}]}]
    turns += [item.model_dump(exclude_none=True) for item in first.output]  # as clients keep a conversation
    turns.append({"role": "user", "content": "And then?"})
    second = client.responses.create(model=MODEL, input=turns, max_output_tokens=6, temperature=0)
    chat = client.chat.completions.create(
        model=MODEL, max_tokens=6, temperature=0,
        messages=[
            {"role": "user", "content": "Tell me about the gateway"},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "And then?"},
        ],
    )  # fmt: skip
    assert second.output_text == chat.choices[0].message.content
    assert second.usage.input_tokens == chat.usage.prompt_tokens


def test_streamed_events_are_numbered_and_add_up_to_the_whole_response(client):
    whole = client.responses.create(model=MODEL, input="Tell me about the gateway", max_output_tokens=10, temperature=0)
    events = list(
        client.responses.create(
            model=MODEL, input="Tell me about the gateway", max_output_tokens=10, temperature=0, stream=True
        )
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
    ]  # fmt: skip
    assert kinds[-4:] == [
        "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete",
    ]  # fmt: skip
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    last = events[-1].response
    assert deltas == last.output_text == whole.output_text
    assert events[0].response.id == last.id and last.usage.output_tokens == 10
    assert {e.item_id for e in events if e.type == "response.output_text.delta"} == {last.output[0].id}


def test_a_function_without_strict_is_strict_as_the_responses_api_has_it(client):
    """Left out, `strict` is true in the Responses API: a forced call follows the schema, and the response says so
    (it went to chat as not strict: `arguments={}` for a tool asking for two fields; a review)."""
    tool = {k: v for k, v in WEATHER.items() if k != "strict"}
    tool["parameters"] = WEATHER["parameters"] | {
        "properties": {"city": {"type": "string", "maxLength": 12}, "hour": {"type": "integer"}},
        "required": ["city", "hour"],
    }
    response = client.responses.create(
        model=MODEL, input="Weather in Paris?", tools=[tool], tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=300, temperature=1.0, extra_body={"seed": 5},
    )  # fmt: skip
    (call,) = response.output
    jsonschema.validate(json.loads(call.arguments), tool["parameters"])
    assert response.tools[0].strict is True


def test_a_function_call_round_trip(client):
    """A forced call is a function_call item whose arguments follow the schema; the stream helper assembles it
    to the same; the call and its output given back are answered."""
    response = client.responses.create(
        model=MODEL, input="Weather in Paris?", tools=[WEATHER], tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=300, temperature=0,
    )  # fmt: skip
    assert response.status == "completed"
    (call,) = response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id
    assert response.parallel_tool_calls is False  # (a review) as served: a forced answer makes one call
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    with client.responses.stream(
        model=MODEL, input="Weather in Paris?", tools=[WEATHER], tool_choice="required", max_output_tokens=300,
        temperature=0,
    ) as stream:  # fmt: skip
        kinds = [event.type for event in stream]
        streamed = stream.get_final_response()
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
    assert streamed.output[0].arguments == call.arguments
    answered = client.responses.create(
        model=MODEL, tools=[WEATHER], max_output_tokens=4,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
    )  # fmt: skip
    assert answered.output and answered.usage.input_tokens > response.usage.input_tokens
    assert answered.parallel_tool_calls is True  # the model's own choice may hold several


@pytest.mark.parametrize(
    "fields",
    [
        {"instructions": "My e-mail is ann@example.com", "input": "hello"},
        {"input": "My card is ４１１１ １１１１ １１１１ １１１１"},  # full-width digits
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "Reach me at ann@example.com"}]}]},
        {
            "input": [
                {"role": "user", "content": "what did the tool say?"},
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "IBAN DE89 3704 0044 0532 0130 00"},
            ]
        },
        {"input": "hello", "metadata": {"privacy": "pii"}},
        {  # a review: the chat template writes these arguments back as {"card": 4111111111111111.0}
            "input": [
                {"role": "user", "content": "pay"},
                {"type": "function_call", "call_id": "c1", "name": "pay", "arguments": '{"card":4.111111111111111e15}'},
                {"type": "function_call_output", "call_id": "c1", "output": "done"},
            ]
        },
    ],
    ids=["instructions", "full-width-card", "input-part", "function-output", "metadata-tag", "float-arguments"],
)
def test_personal_data_anywhere_in_a_response_request_keeps_it_on_the_edge(client, fields):
    raw = client.responses.with_raw_response.create(model=MODEL, max_output_tokens=2, **fields)
    assert raw.headers["x-tandem-route"] == "edge; rule=private"


@pytest.mark.parametrize(
    "fields, param, words",
    [
        ({"store": True}, "store", "keeps no responses"),
        ({"previous_response_id": "resp_1"}, "previous_response_id", "keeps no responses"),
        ({"background": True}, "background", "not served"),
        ({"reasoning": {"effort": "low"}}, "reasoning", "not served"),
        ({"conversation": "conv_1"}, "conversation", "keeps no responses"),
        ({"colour": "blue"}, "colour", "unknown field"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]", "needs a stored response"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "only function tools"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content",
            "part 0 of type 'input_image' is not served: text only",
        ),
        ({"input": "tell me more " * 3000}, "input", "maximum context length"),
        (
            {"input": [{"role": "user", "content": "hi"}, {"type": "function_call_output", "call_id": "x", "output": "y"}]},
            "input",
            "input[1]: a function_call_output must answer",
        ),
        # what a review found: a 500 for a type that is no string, parts that carry the other's text
        ({"input": [{"type": ["x"], "role": "user", "content": "hi"}]}, "input[0].type", "not a string"),
        ({"input": [{"role": "user", "content": [{"type": "refusal", "refusal": "no", "text": "yes"}]}]},
         "input[0].content", "part 0: a part of type 'refusal' carries refusal, not text"),
        ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content", "part 0: a part"),
        ({"text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, "text.format",
         "needs name and schema"),
        ({"tool_choice": {"type": "function"}}, "tool_choice", "tool_choice.name: Field required"),
        # a schema that refers to itself without end: one line, not the parser's whole state (a review)
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"$ref": "#/$defs/a", "$defs": {"a": {
            "$ref": "#/$defs/a"}}}}}}, "text.format", "the parser cannot go on with this schema"),
        # the caller's own names are not rewritten into Responses words
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "max_tokens"}}, "tool_choice",
         "'max_tokens'"),
        # (a review) a schema beside json_object was dropped, and echoed back as if applied
        ({"text": {"format": {"type": "json_object", "name": "Thing", "schema": {"type": "object"}}}}, "text.format",
         "a json_object format takes only type; name is json_schema's"),
    ],
    ids=[
        "store", "previous", "background", "reasoning", "conversation", "unknown", "item-reference", "web-search",
        "image", "too-long", "unanswered-output", "type-list", "refusal-with-text", "text-part-without-text",
        "schema-without-name", "named-choice-without-name", "self-referring-schema", "callers-own-name",
        "schema-beside-json-object",
    ],
)  # fmt: skip
def test_what_cannot_be_honoured_is_a_400_naming_the_responses_field(client, fields, param, words):
    body = {"model": MODEL, "input": "hello", "max_output_tokens": 3} | fields
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(**{k: v for k, v in body.items() if k in ("model", "input", "max_output_tokens")},
                                extra_body={k: v for k, v in body.items() if k not in ("model", "input", "max_output_tokens")})  # fmt: skip
    error = err.value.response.json()["error"]
    assert error["param"] == param and words in error["message"], error
    assert "_" != error["message"][:1] and "_Named" not in error["message"]  # no private class names
    assert "<state>" not in error["message"] and len(error["message"]) < 600


def test_items_given_back_as_dicts_and_nulls_read_as_not_given(client):
    """`model_dump()` of a response's items (with the nulls the client writes: phase, caller, namespace) is
    input as it is; `stream: null` is no stream; escaped lone surrogates in arguments are no 500."""
    first = client.responses.create(model=MODEL, input="Tell me about the gateway", max_output_tokens=4)
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"\\ud800"}'}
    dumped = [item.model_dump() for item in first.output]
    assert any("phase" in item for item in dumped)
    answer = client.responses.create(
        model=MODEL, max_output_tokens=3, tools=[WEATHER], stream=None,
        input=[{"role": "user", "content": "hi"}, *dumped, call,
               {"type": "function_call_output", "call_id": "c1", "output": "rain"}],
    )  # fmt: skip
    assert answer.status in ("completed", "incomplete") and answer.completed_at


def test_what_parse_returns_and_the_clients_own_input_types_dumped_are_input(client):
    """(a review) `responses.parse()`'s output carries `parsed` (and a strict call `parsed_arguments`): sent back as
    `model_dump()` it was a 400, as were the nulls the client's own types write (a message's `type`, a tool's
    `defer_loading`). And `usage` validates as the client's type: `cache_write_tokens` was missing."""
    from typing import Literal

    from openai.types.responses import Response
    from openai.types.responses.easy_input_message import EasyInputMessage
    from pydantic import BaseModel

    class Pick(BaseModel):
        choice: Literal["a", "b"]  # short: the demo model's answer ends well within max_output_tokens

    parsed = client.responses.parse(model=MODEL, input="Pick one", text_format=Pick, max_output_tokens=60)
    assert parsed.output_parsed.choice in ("a", "b")
    dumped = [item.model_dump() for item in parsed.output]
    asked = EasyInputMessage(role="user", content="more").model_dump()  # {"type": None, "phase": None, ...}
    assert asked["type"] is None
    tool = openai.types.responses.FunctionTool(**WEATHER).model_dump()
    again = client.responses.create(
        model=MODEL, max_output_tokens=3, tools=[tool], input=[{"role": "user", "content": "Pick one"}, *dumped, asked]
    )
    assert again.status in ("completed", "incomplete")
    Response.model_validate(again.model_dump(), strict=True)  # every field the client's type requires is there
    assert again.usage.input_tokens_details.cache_write_tokens == 0

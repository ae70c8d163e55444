"""A value of the wrong JSON type is a 400 naming its field, as OpenAI's ("Invalid type for 'max_tokens'"), not
coerced: `"2"` read as 2 and `1` as true let a client's bug pass here and fail on OpenAI."""

import json

import pytest
from pydantic import ValidationError

from serving.checkpoint import GenerationDefaults
from serving.openai.schemas import ChatCompletionRequest, CompletionRequest

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
LEGACY = {"model": "m", "prompt": "hi"}


@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (ChatCompletionRequest, CHAT | {"max_tokens": "2"}, "max_tokens"),
        (ChatCompletionRequest, CHAT | {"max_tokens": True}, "max_tokens"),
        (ChatCompletionRequest, CHAT | {"stream": "true"}, "stream"),
        (ChatCompletionRequest, CHAT | {"stream": 1}, "stream"),
        (ChatCompletionRequest, CHAT | {"logprobs": "yes"}, "logprobs"),
        (ChatCompletionRequest, CHAT | {"temperature": "0.5"}, "temperature"),
        (ChatCompletionRequest, CHAT | {"n": 2.0}, "n"),
        (ChatCompletionRequest, CHAT | {"messages": [{"role": "user", "content": 5}]}, "messages"),
        (CompletionRequest, LEGACY | {"echo": "false"}, "echo"),
        (CompletionRequest, LEGACY | {"logprobs": "3"}, "logprobs"),
        # what OpenAI refuses is refused here too, so code written against Tandem runs there
        (ChatCompletionRequest, CHAT | {"parallel_tool_calls": False}, "parallel_tool_calls"),  # without tools
    ],
)
def test_a_value_of_the_wrong_type_is_refused_naming_its_field(model, body, field):
    with pytest.raises(ValidationError) as err:
        model.model_validate_json(json.dumps(body))
    assert err.value.errors()[0]["loc"][0] == field


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (ChatCompletionRequest, CHAT | {"temperature": 1, "top_p": 1, "presence_penalty": 0}),  # an integer is a number
        (ChatCompletionRequest, CHAT | {"max_tokens": 2, "stream": False, "logit_bias": {"5": -1}, "seed": 3}),
        (CompletionRequest, LEGACY | {"prompt": [1, 2, 3], "echo": True, "logprobs": 2, "max_tokens": 1}),
        # null inside an object is "not given" as it is at the top
        (ChatCompletionRequest, CHAT | {"stream": True, "stream_options": {"include_usage": None}}),
        (ChatCompletionRequest, CHAT | {"metadata": {"a": "x" * 512, "privacy": ["pii"]}}),
    ],
)
def test_values_of_the_right_type_are_served(model, body):
    model.model_validate_json(json.dumps(body))


@pytest.mark.parametrize("metadata", [{"a": 1}, {"a": {"b": "c"}}, {"a": "x" * 513}, {"a": True}])
def test_a_metadata_value_openai_refuses_is_named(metadata):
    """As OpenAI: values are strings of at most 512 characters (the gateway asks after naming keys meant for
    privacy tags, so `{"local_only": true}` is named as one)."""
    request = ChatCompletionRequest.model_validate(CHAT | {"metadata": metadata})
    assert request.metadata_value_refused()[0] == "a"
    assert ChatCompletionRequest.model_validate(CHAT | {"metadata": {"a": "x" * 512}}).metadata_value_refused() is None


@pytest.mark.parametrize("top_p", [0, 1e-46, 1e-300, 5e-7])
def test_a_nucleus_too_small_for_float32_is_greedy_not_off(top_p):
    """1e-46 is 0 in the engines' float32, and 0 there means "off": the request sampled from every token."""
    request = ChatCompletionRequest.model_validate(CHAT | {"top_p": top_p, "temperature": 1.0})
    assert request.sampling(GenerationDefaults())["temperature"] == 0.0


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
CALL_TURN = {"role": "assistant", "content": "", "tool_calls": [CALL]}


@pytest.mark.parametrize(
    ("message", "served"),
    [
        ({"role": "user", "content": None}, False),
        ({"role": "user", "content": []}, False),
        ({"role": "system", "content": None}, False),
        ({"role": "developer", "content": []}, False),
        ({"role": "user", "content": ""}, True),  # empty text is text, as OpenAI takes it
        ({"role": "assistant", "content": None}, True),  # an answer with no text, sent back (model_dump())
        ({"role": "assistant", "content": None, "tool_calls": [CALL]}, True),
        ({"role": "assistant", "content": None, "refusal": "I cannot help with that."}, True),
        ({"role": "assistant", "content": []}, True),  # LangChain's AIMessage(content=[])
    ],
)
def test_a_users_or_systems_turn_without_content_is_refused(message, served):
    history = [{"role": "user", "content": "hi"}, message]
    if message.get("tool_calls"):
        history.append({"role": "tool", "tool_call_id": "c1", "content": "ok"})
    body = CHAT | {"messages": history}
    if served:
        ChatCompletionRequest.model_validate_json(json.dumps(body))
        return
    with pytest.raises(ValidationError) as err:
        ChatCompletionRequest.model_validate_json(json.dumps(body))
    assert err.value.errors()[0]["loc"][:2] == ("messages", 1) and "needs content" in err.value.errors()[0]["msg"]


def test_an_empty_answer_sent_back_as_history_is_served():
    """Tandem's own answer with tools and no text or call, appended as `message.model_dump()`, then a tool that
    returned an empty list (LangChain's ToolMessage(content=[]))."""
    answer = {"role": "assistant", "content": None, "refusal": None, "annotations": None, "audio": None,
              "function_call": None, "tool_calls": None}  # fmt: skip
    history = [{"role": "user", "content": "hi"}, answer, {"role": "user", "content": "again"}, CALL_TURN,
               {"role": "tool", "tool_call_id": "c1", "content": []}]  # fmt: skip
    ChatCompletionRequest.model_validate_json(json.dumps(CHAT | {"messages": history}))


@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (CompletionRequest, LEGACY | {"prompt": [0.5] * 200_000}, "prompt"),
        (CompletionRequest, LEGACY | {"prompt": [[0.5] * 1000] * 200}, "prompt"),
        (ChatCompletionRequest, CHAT | {"modalities": ["x"] * 200_000}, "modalities"),
        (ChatCompletionRequest, CHAT | {"messages": [{"role": "user", "content": "x"}, 5] * 1024}, "messages"),
    ],
)
def test_a_long_list_of_wrong_items_is_refused_at_its_first(model, body, field):
    """(a review) Each wrong item of a list was an error of its own, one per type a union tried: a 2 MB body of
    500,000 floats was 1.5 million errors and 10 s of the interpreter's lock, and every other request waited."""
    with pytest.raises(ValidationError) as err:
        model.model_validate_json(json.dumps(body))
    assert err.value.error_count() <= 8 and err.value.errors()[0]["loc"][0] == field

"""A value of the wrong JSON type is a 400 naming its field, as OpenAI's ("Invalid type for 'max_tokens'"), not
coerced: `"2"` read as 2 and `1` as true let a client's bug pass here and fail on OpenAI."""

import json

import pytest
from pydantic import ValidationError

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
    ],
)
def test_values_of_the_right_type_are_served(model, body):
    model.model_validate_json(json.dumps(body))


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

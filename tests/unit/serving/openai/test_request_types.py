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

"""A prompt too long for the model: OpenAI's `context_length_exceeded`, with sizes that add up."""

import re

import pytest

from serving.openai.answer import max_tokens_within
from serving.openai.errors import PromptTooLong


def _max_tokens(requested, num_prompt):
    """The gateway's and the local agent's sizing, for a context of 2,048 and a default of 128."""
    return max_tokens_within(requested, num_prompt, 2048, 128, "messages")


@pytest.mark.parametrize(
    ("requested", "num_prompt", "says"),
    [
        (None, 4208, "your messages resulted in 4208 tokens"),  # asked for nothing: the prompt alone is too long
        (None, 2048, "your messages resulted in 2048 tokens"),  # it fills the context: no room for one token
        (100, 2000, "you requested 2100 tokens (2000 in the messages, 100 in the completion)"),
        (3000, 10, "you requested 3010 tokens (10 in the messages, 3000 in the completion)"),
    ],
)
def test_the_message_names_what_was_asked_and_no_negative_size(requested, num_prompt, says):
    with pytest.raises(PromptTooLong) as err:
        _max_tokens(requested, num_prompt)
    assert says in err.value.message and err.value.param == "messages"
    assert not re.search(r"-\d", err.value.message)


def test_without_max_tokens_the_answer_gets_the_room_left_up_to_the_default():
    assert _max_tokens(None, 2000) == 48
    assert _max_tokens(None, 10) == 128

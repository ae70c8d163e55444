"""A history with tool calls follows OpenAI's rules, or the request is a 400 naming `messages` and the turn."""

import pytest
from pydantic import ValidationError

from serving.openai.schemas import ChatCompletionRequest

U = {"role": "user", "content": "weather in Paris?"}


def call(*ids):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "weather", "arguments": "{}"}} for i in ids]}  # fmt: skip


def reply(call_id, text="21 C"):
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def ask(*messages):
    return ChatCompletionRequest.model_validate({"model": "m", "messages": list(messages)})


@pytest.mark.parametrize(
    "messages",
    [
        [U, call("c1"), reply("c1")],
        [U, call("c1", "c2"), reply("c2"), reply("c1"), {"role": "assistant", "content": "21 and 19"}, U],
        [U, call("c1"), reply("c1"), U, call("c2"), reply("c2")],
        # calls without ids (some clients send none): their answers cannot be matched, only counted as tool turns
        [U, {"role": "assistant", "tool_calls": [{"function": {"name": "weather", "arguments": "{}"}}]}, reply("x")],
        [U, {"role": "assistant", "content": "no call", "tool_calls": []}, U],
        # the openai client's stream helper keeps each call's stream `index`; an agent loop sends it back
        [U, {"role": "assistant", "tool_calls": [{**call("c1")["tool_calls"][0], "index": 0}]}, reply("c1")],
    ],
    ids=["one", "two-in-any-order", "two-turns", "calls-without-ids", "empty-calls", "stream-helper-index"],
)
def test_histories_openai_serves_are_served(messages):
    assert len(ask(*messages).messages) == len(messages)


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ([U, call("c1"), {"role": "tool", "content": "21 C"}], "messages[2]: a tool message needs tool_call_id"),
        ([U, reply("c1")], "messages[1]: a tool message must answer a call"),
        ([U, call("c1"), reply("c9")], "messages[2]: tool_call_id 'c9' is none of the calls before it (c1)"),
        ([U, call("c1"), U], "followed by a tool message for each call, before messages[2]; none answers c1"),
        ([U, call("c1", "c2"), reply("c1")], "before the end; none answers c2"),
        ([U, call("c1"), reply("c1"), U, reply("c1")], "messages[4]: a tool message must answer a call"),
    ],
    ids=["no-id", "no-call-before", "unknown-id", "unanswered-then-user", "one-of-two-unanswered", "answer-too-late"],
)
def test_a_broken_history_is_refused_naming_the_turn(messages, says):
    with pytest.raises(ValidationError) as err:
        ask(*messages)
    (error,) = err.value.errors()
    assert error["loc"] == ("messages",) and says in error["msg"], error["msg"]

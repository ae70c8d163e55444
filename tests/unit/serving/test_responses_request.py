"""A Responses API request read into the chat request it is answered by."""

from serving.openai.responses import ResponsesRequest, responses_words


def test_calls_after_an_assistants_text_are_that_turns_and_outputs_are_tool_turns():
    request = ResponsesRequest.model_validate({
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": "weather?"},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
            {"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}", "id": "fc_1"},
            {"type": "function_call", "call_id": "b", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a", "output": "sunny"},
            {"type": "function_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "rain"}]},
        ],
    })  # fmt: skip
    chat, origins = request.chat_request()
    roles = [(m["role"], len(m.get("tool_calls") or ())) for m in chat["messages"]]
    assert roles == [("system", 0), ("user", 0), ("assistant", 2), ("tool", 0), ("tool", 0)]
    assert chat["messages"][2]["content"] == [{"type": "text", "text": "Looking."}]
    assert origins == ["instructions", "input[0]", "input[1]", "input[4]", "input[5]"]
    # a refusal of the chat request names the Responses item and field it came from
    said = "messages[3]: a tool message must answer a call; max_completion_tokens too large"
    assert (
        responses_words(said, origins)
        == "input[4]: a function_call_output must answer a call; max_output_tokens too large"
    )


def test_calls_with_no_turn_before_them_are_an_assistant_turn_of_their_own():
    request = ResponsesRequest.model_validate({
        "model": "m", "instructions": "x",
        "input": [{"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}"}],
    })  # fmt: skip
    chat, _ = request.chat_request()
    assert [m["role"] for m in chat["messages"]] == ["system", "assistant"]


def test_fields_it_cannot_honour_are_named_and_false_or_none_are_fine():
    def refused(**fields):
        return ResponsesRequest.model_validate({"model": "m", "input": "hi"} | fields).refused_field()

    assert refused(store=False, background=False, include=[], truncation="disabled", reasoning=None) is None
    assert refused(store=True)[0] == "store"
    assert refused(store=1)[0] == "store"  # 1 is not false
    assert refused(truncation="auto")[0] == "truncation"
    assert refused(include=["reasoning.encrypted_content"])[0] == "include"
    assert refused(colour="blue") == ("colour", "unknown field: colour")


def test_a_function_is_strict_unless_it_says_not_as_the_responses_api_has_it():
    """A Responses function without `strict` went to chat without it: not strict, its calls free to leave the schema
    (`arguments={}` for a tool that asks for two fields), where OpenAI's Responses API holds calls to it (a review)."""
    tool = {
        "type": "function",
        "name": "w",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    for given, served in ((None, True), (True, True), (False, False)):
        fields = tool if given is None else tool | {"strict": given}
        request = ResponsesRequest.model_validate({"model": "m", "input": "hi", "tools": [fields]})
        chat, _ = request.chat_request()
        assert chat["tools"][0]["function"]["strict"] is served


def test_a_refusal_of_the_schema_names_the_responses_field():
    """`text.format.json_schema.name` named a path the Responses API does not have (a review): its name, schema and
    strict are in text.format itself."""
    said = "response_format.json_schema.name must be 1-64 letters, digits, '_' or '-'"
    assert responses_words(said, []) == "text.format.name must be 1-64 letters, digits, '_' or '-'"
    assert responses_words("response_format", []) == "text.format"


def test_a_function_whose_schema_cannot_be_held_is_not_strict_when_it_does_not_say():
    """Strict implied, a schema with `uniqueItems` or a look-ahead was a 400 where it served before (a review): left
    out, it is served not strict; said, strict as asked."""
    for parameters in ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}},
                       {"type": "object", "properties": {"s": {"type": "string", "pattern": "(?=a)a"}}}):  # fmt: skip
        tool = {"type": "function", "name": "w", "parameters": parameters}
        implied = ResponsesRequest.model_validate({"model": "m", "input": "hi", "tools": [tool]}).chat_request()[0]
        said = ResponsesRequest.model_validate({"model": "m", "input": "hi", "tools": [tool | {"strict": True}]})
        assert implied["tools"][0]["function"]["strict"] is False
        assert said.chat_request()[0]["tools"][0]["function"]["strict"] is True

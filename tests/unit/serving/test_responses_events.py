"""A chat answer's stream written as the Responses API's events."""

import asyncio
import json

from serving.openai.responses import ResponseEvents, ResponsesRequest


def _chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body = {"id": "chatcmpl-abc", "created": 1, "model": "m", "choices": choices, "usage": usage}
    return f"data: {json.dumps(body)}\n\n"


async def _stream(events: list[str]):
    for event in events:
        yield event


def _events(chat: list[str]) -> list[dict]:
    async def run():
        request = ResponsesRequest.model_validate({"model": "m", "input": "hi", "stream": True})
        return [e async for e in ResponseEvents(request).translate(_stream(chat))]

    return [json.loads(e.split("data: ", 1)[1]) for e in asyncio.run(run())]


USAGE = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
CALL = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":'}}


def test_a_failure_mid_answer_keeps_the_text_written_so_far():
    events = _events([
        _chunk({"role": "assistant", "content": ""}), _chunk({"content": "Hello "}), _chunk({"content": "wor"}),
        'data: {"error": {"message": "backend failed mid-answer", "type": "server_error", "code": "backend_failed"}}\n\n',
        "data: [DONE]\n\n",
    ])  # fmt: skip
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    (message,) = failed["output"]
    assert message["content"][0]["text"] == "Hello wor" and message["status"] == "incomplete"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_a_call_cut_by_max_output_tokens_is_incomplete_in_its_own_done_event():
    events = _events([
        _chunk({"role": "assistant", "content": ""}), _chunk({"tool_calls": [CALL]}),
        _chunk({}, finish="length"), _chunk(None, usage=USAGE),
    ])  # fmt: skip
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [d["item"]["status"] for d in done] == ["incomplete"]
    last = events[-1]
    assert last["type"] == "response.incomplete" and last["response"]["output"][0]["status"] == "incomplete"
    assert last["response"]["usage"]["output_tokens"] == 4


def test_text_then_calls_are_items_in_that_order_and_complete():
    events = _events([
        _chunk({"role": "assistant", "content": ""}), _chunk({"content": "Let me look."}),
        _chunk({"tool_calls": [CALL | {"function": {"name": "f", "arguments": "{}"}}]}),
        _chunk({}, finish="tool_calls"), _chunk(None, usage=USAGE),
    ])  # fmt: skip
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed"
    assert [(item["type"], item["status"]) for item in final["output"]] == [
        ("message", "completed"), ("function_call", "completed"),
    ]  # fmt: skip
    assert final["output"][1]["call_id"] == "call_1"

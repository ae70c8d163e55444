"""The one SSE decoder (tandem_sdk/sse.py) the SDK's streams and the gateway's HTTP backends share."""

import asyncio
import json

import pytest
from tandem_sdk.sse import aevents, events

CASES = [
    # what Tandem, vLLM and OpenAI send
    (['data: {"a": 1}', "", 'data: {"a": 2}', "", "data: [DONE]", ""], [{"a": 1}, {"a": 2}]),
    # no space after the colon; comments and other fields carry no data
    ([": keep-alive", "", "event: message", 'data:{"a": 1}', "id: 7", "retry: 100", ""], [{"a": 1}]),
    # one event over several data lines (joined by newlines: JSON with a line break in it)
    (['data: {"a":', "data: 1}", ""], [{"a": 1}]),
    # nothing after [DONE] is read
    (['data: {"a": 1}', "", "data: [DONE]", "", 'data: {"a": 2}', ""], [{"a": 1}]),
    # a last event without its blank line still counts
    (['data: {"a": 1}', "", 'data: {"a": 2}'], [{"a": 1}, {"a": 2}]),
    # the old line-by-line readers took this as two events: "{" and "}" (and failed)
    (["data: {", 'data: "a": 3', "data: }", ""], [{"a": 3}]),
    # tolerated: a trailing space after [DONE], an empty data line, events one line break apart
    (['data: {"a": 1}', "", "data", "", "data: [DONE] ", ""], [{"a": 1}]),
    (['data: {"a": 1}', 'data: {"a": 2}', "data: [DONE]", ""], [{"a": 1}, {"a": 2}]),
]


@pytest.mark.parametrize(("lines", "expected"), CASES)
def test_events_sync_and_async_agree(lines, expected):
    async def collect():
        async def source():
            for line in lines:
                yield line

        return [e async for e in aevents(source())]

    assert list(events(iter(lines))) == expected
    assert asyncio.run(collect()) == expected


def test_data_that_is_not_json_is_an_error():
    with pytest.raises(json.JSONDecodeError):
        list(events(iter(["data: not json", ""])))

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


def _both(lines: list[str], **kwargs) -> list:
    """What the sync and the async decoder make of `lines` (the same)."""

    async def collect():
        async def source():
            for line in lines:
                yield line

        return [e async for e in aevents(source(), **kwargs)]

    sync = list(events(iter(lines), **kwargs))
    assert asyncio.run(collect()) == sync
    return sync


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ('{"message": "backend died"}', {"message": "backend died"}),
        ("backend died", {"message": "backend died"}),
        ('{"error": {"message": "x", "code": "c"}}', {"message": "x", "code": "c"}),
        ('{"type": "error", "message": "x"}', {"type": "error", "message": "x"}),  # the Responses API's form
    ],
)
def test_an_error_event_is_read_as_openais_error_never_as_a_chunk(data, error):
    assert _both(["event: error", f"data: {data}", "", "data: [DONE]", ""]) == [{"error": error}]


def test_a_stream_that_ends_without_done_is_an_error_when_done_is_required():
    from tandem_sdk.sse import StreamEndedEarly

    assert _both(['data: {"a": 1}', ""]) == [{"a": 1}]  # the gateway's backends check the finish reason instead
    assert _both(['data: {"a": 1}', "", "data: [DONE]"], require_done=True) == [{"a": 1}]
    got = []
    with pytest.raises(StreamEndedEarly, match=r"ended without \[DONE\]"):
        got.extend(events(iter(['data: {"a": 1}', "", 'data: {"a": 2}']), require_done=True))
    assert got == [{"a": 1}, {"a": 2}]  # what came is yielded first

    async def collect():
        async def source():
            yield 'data: {"a": 1}'

        return [e async for e in aevents(source(), require_done=True)]

    with pytest.raises(StreamEndedEarly):
        asyncio.run(collect())


def test_events_one_line_break_apart_are_each_given_as_they_come_and_done_ends_at_once():
    """(a review) A server that ends events with one line break had them all given at once, when its connection
    closed; and with the connection left open after `data: [DONE]`, the whole answer was lost to the idle timeout.
    Each is given as the next one starts, and [DONE] ends the stream without waiting for what follows."""
    given = []

    def lines():
        for i in range(3):
            yield f'data: {{"a": {i}}}'
            given.append(i)
        yield "data: [DONE]"
        raise AssertionError("read past [DONE]: the stream would wait for a line that never comes")

    read = []
    for event in events(lines()):
        read.append((event, list(given)))
    assert read == [({"a": 0}, [0]), ({"a": 1}, [0, 1]), ({"a": 2}, [0, 1, 2])]  # each before the one after it

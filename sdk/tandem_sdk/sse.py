"""Server-sent events as OpenAI-compatible servers stream them: one decoder for the SDK's streams and the
gateway's HTTP backends (which imports it from here: the SDK imports nothing of the server side).

Per the SSE format: an event is its `data:` lines (one leading space dropped, several joined by newlines), ended
by a blank line; comment lines (`:`) and other fields (`event:`, `id:`, `retry:`) carry no data; `[DONE]` ends
the stream. A last event the server did not end with a blank line still counts.
"""

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

DONE = "[DONE]"


class SseDecoder:
    """Feed it lines (without their line breaks); it returns each event's data once the event is complete."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        if not line:  # a blank line ends the event
            return self.end()
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value.removeprefix(" "))
        return None  # a comment (empty field name) or another field

    def end(self) -> str | None:
        """The pending event's data, if any (at a blank line, or when the stream ends); an event whose data is
        empty is not one (as the format has it)."""
        data, self._data = "\n".join(self._data), []
        return data.strip() or None


def _payloads(data: str) -> tuple[list[dict], bool]:
    """An event's JSON objects and whether the stream is done. A server that separates events with one line break
    instead of a blank line (not the format, but seen) sends several as one: each line is then one."""
    if data == DONE:
        return [], True
    try:
        return [json.loads(data)], False
    except json.JSONDecodeError:
        if "\n" not in data:
            raise
    out = []
    for line in data.split("\n"):
        if line.strip() == DONE:
            return out, True
        out.append(json.loads(line))
    return out, False


def events(lines: Iterable[str]) -> Iterator[dict]:
    """Each event's data as JSON, up to `[DONE]`; json.JSONDecodeError for data that is not JSON."""
    decoder = SseDecoder()
    for line in _with_end(lines):
        data = decoder.feed(line)
        if data is not None:
            payloads, done = _payloads(data)
            yield from payloads
            if done:
                return


async def aevents(lines: AsyncIterable[str]) -> AsyncIterator[dict]:
    """`events` for an async line stream (httpx's `aiter_lines`)."""
    decoder = SseDecoder()
    async for line in lines:
        data = decoder.feed(line)
        if data is not None:
            payloads, done = _payloads(data)
            for payload in payloads:
                yield payload
            if done:
                return
    data = decoder.end()
    if data is not None:
        for payload in _payloads(data)[0]:
            yield payload


def _with_end(lines: Iterable[str]) -> Iterator[str]:
    yield from lines
    yield ""

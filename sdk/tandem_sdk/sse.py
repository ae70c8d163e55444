"""Server-sent events as OpenAI-compatible servers stream them: one decoder for the SDK's streams and the
gateway's HTTP backends (which imports it from here: the SDK imports nothing of the server side).

Per the SSE format: an event is its `data:` lines (one leading space dropped, several joined by newlines), ended
by a blank line; comment lines (`:`) and the `id:` and `retry:` fields carry no data; `[DONE]` ends the stream. A
last event the server did not end with a blank line still counts, and events a server parts with one line break
(not the format, but seen) are each given as the next one begins. An `event: error` event is the server's error,
whatever its data: it is read as OpenAI's mid-stream error, `{"error": {...}}`, never as a chunk.
"""

import json
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

DONE = "[DONE]"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class Lines:
    """An event stream's lines from its text as it arrives, one home for the SDK's streams and the gateway's HTTP
    backends: CR LF, LF or CR ends a line (as the format has it), a CR LF cut between two reads is one break, and a
    long line's parts are not split again as each arrives. ValueError for a line over `most` characters (None: no
    bound)."""

    def __init__(self, most: int | None = None) -> None:
        self._pending, self._most = "", most

    def feed(self, text: str) -> list[str]:
        if "\n" not in text and "\r" not in text and not self._pending.endswith("\r"):
            self._pending += text
            lines = []
        else:
            text = self._pending + text
            cut = len(text) - 1 if text.endswith("\r") else len(text)  # a CR whose LF may come in the next read
            lines = _LINE_BREAK.split(text[:cut])
            self._pending = lines.pop() + text[cut:]
        if self._most is not None and len(self._pending) > self._most:
            raise ValueError(f"a line over {self._most:,} characters")
        return lines

    def end(self) -> list[str]:
        """The last line, where the stream ended without its line break."""
        lines = _LINE_BREAK.split(self._pending)
        self._pending = ""
        return lines[:-1] if lines[-1] == "" else lines


class StreamEndedEarly(Exception):
    """The stream closed before `[DONE]`: a proxy's idle timeout or a server that stopped between two events looks
    like a clean end, but what came is not the whole answer."""


class SseDecoder:
    """Feed it lines (without their line breaks); it returns each event's name ("" when it has none) and data once
    the event is complete."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._name = ""
        self._first = True

    def feed(self, line: str) -> list[tuple[str, str]]:
        """The events this line completes (most lines complete none)."""
        if self._first:  # a byte-order mark before the stream's first line is no part of it (the format says so;
            self._first = False  # it made the first event's field `\ufeffdata`, and its text was lost: a review)
            line = line.removeprefix("\ufeff")
        if not line:  # a blank line ends the event
            return _some(self.end())
        field, _, value = line.partition(":")
        if field == "event":
            self._name = value.strip()
        if field != "data":
            return []  # a comment (empty field name) or another field
        value, done = value.removeprefix(" "), []
        if self._data and value.lstrip().startswith(("{", DONE)) and _whole_json("\n".join(self._data)):
            # A server that ends events with one line break (not the format, but seen): the event before is whole
            # and goes now, not at a blank line that never comes (a review: nothing streamed until the connection
            # closed, and a [DONE] on a connection left open lost the whole answer to the idle timeout)
            done = _some(self.end())
        self._data.append(value)
        if value.strip() == DONE and len(self._data) == 1 and not self._name:
            done += _some(self.end())  # the end, whatever follows it
        return done

    def end(self) -> tuple[str, str] | None:
        """The pending event's name and data, if any (at a blank line, or when the stream ends); an event whose
        data is empty is not one (as the format has it)."""
        name, data = self._name, "\n".join(self._data).strip()
        self._name, self._data = "", []
        return (name, data) if data else None


def _some(event: tuple[str, str] | None) -> list[tuple[str, str]]:
    return [] if event is None else [event]


def _whole_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _payloads(name: str, data: str) -> tuple[list[dict], bool]:
    """An event's JSON objects and whether the stream is done. A server that separates events with one line break
    instead of a blank line (not the format, but seen) sends several as one: each line is then one."""
    if name == "error":
        return [_error(data)], False
    if data == DONE:
        return [], True
    try:
        return [_json(data)], False
    except json.JSONDecodeError:
        if "\n" not in data:
            raise
    out = []
    for line in data.split("\n"):
        if line.strip() == DONE:
            return out, True
        out.append(_json(line))
    return out, False


def _json(text: str):
    """json.loads, with JSON nested past the parser's depth a JSONDecodeError like any other that is no event (it
    was a RecursionError, past every handler of the SDK's: a review)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep", text, 0) from None


def _error(data: str) -> dict:
    """An `event: error` event in OpenAI's shape, `{"error": {"message": ...}}`, whether its data is that already,
    the error object alone, or plain text: a reader that looks for "error" finds it."""
    try:
        error = _json(data)
    except json.JSONDecodeError:
        error = data
    if isinstance(error, dict) and "error" in error:
        return error
    return {"error": error if isinstance(error, dict) else {"message": str(error)}}


def events(lines: Iterable[str], require_done: bool = False) -> Iterator[dict]:
    """Each event's data as JSON, up to `[DONE]`; json.JSONDecodeError for data that is not JSON. With
    `require_done`, a stream that ends without `[DONE]` raises StreamEndedEarly after what it sent."""
    decoder = SseDecoder()
    for line in _with_end(lines):
        for event in decoder.feed(line):
            payloads, done = _payloads(*event)
            yield from payloads
            if done:
                return
    if require_done:
        raise StreamEndedEarly(f"the stream ended without {DONE}")


async def aevents(lines: AsyncIterable[str], require_done: bool = False) -> AsyncIterator[dict]:
    """`events` for an async line stream (httpx's `aiter_lines`)."""
    decoder = SseDecoder()
    async for line in lines:
        for event in decoder.feed(line):
            payloads, done = _payloads(*event)
            for payload in payloads:
                yield payload
            if done:
                return
    event = decoder.end()
    if event is not None:
        payloads, done = _payloads(*event)
        for payload in payloads:
            yield payload
        if done:
            return
    if require_done:
        raise StreamEndedEarly(f"the stream ended without {DONE}")


def _with_end(lines: Iterable[str]) -> Iterator[str]:
    yield from lines
    yield ""

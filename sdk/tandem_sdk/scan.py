"""What of a request the PII detectors read: one function, run by the SDK before the wire and by the gateway.

`request_text(body)` takes an OpenAI chat or completions body (a dict, as
sent) and returns everything in it that would leave the device:
- every message of every role: its content (a string, or content parts,
  whose texts are joined with nothing, as the model reads them), and every
  other string in it (`name`, `tool_calls` names and arguments, decoded too
  when they hold `\\u` escapes, an image part's URL, refusal text);
- the completions `prompt` in each accepted form (a string, strings, token
  ids, lists of token ids: ids are decoded with `decode`, so token ids are no
  way around the detectors), and `suffix`;
- `stop` strings, `user`, the `tools` given to the model and the
  `response_format` (a JSON schema's names, descriptions, enums, property
  names, and each `pattern` as the text it spells).
Keys and `type`/`role` values are structure, and skipped, only when they are
plain words (letters, `_`, `-`): `{"type": "ann@example.com"}` is scanned.
Messages and fields are joined with a line break, so a number split across
two messages reads as one (a line break parts digit groups like a space).

The detectors then see the same text on the device and at the gateway.
"""

import json
import re
from collections.abc import Callable, Iterator, Mapping

_STRUCTURE_KEYS = frozenset({"role", "type"})  # what says how, not what: skipped when the value is a plain word
_STRUCTURE_WORD = re.compile(r"[A-Za-z_-]{1,32}")  # "user", "function", "json_schema": no digit, no @, no dot


def request_text(body: Mapping, decode: Callable[[list[int]], str] | None = None) -> str:
    """Every piece of text in a chat or completions request body that leaves with it."""
    return "\n".join(_pieces(body, decode))


def _pieces(body: Mapping, decode: Callable[[list[int]], str] | None) -> Iterator[str]:
    for message in body.get("messages") or ():
        yield _message_text(message)
    yield from _prompt_texts(body.get("prompt"), decode)
    for key in ("suffix", "user"):
        if isinstance(body.get(key), str):
            yield body[key]
    yield from _strings(body.get("stop"))
    for key in ("tools", "response_format"):  # a JSON schema's names, descriptions and enums leave too
        if body.get(key):
            yield from _strings(body[key])


def _message_text(message) -> str:
    if not isinstance(message, Mapping):
        return "\n".join(_strings(message))
    pieces = []
    content = message.get("content")
    if isinstance(content, str):
        pieces.append(content)
    elif isinstance(content, list | tuple):
        # Parts are one text to the model: "ann@exam" + "ple.com" is an address.
        pieces.append("".join(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)))
        pieces += [s for p in content for s in _strings(p, skip_text=True)]
    for key, value in message.items():
        if key != "content":
            pieces += _strings({key: value})  # role and type skipped only as plain words
    return "\n".join(pieces)


def _prompt_texts(prompt, decode: Callable[[list[int]], str] | None) -> Iterator[str]:
    if prompt is None:
        return
    if isinstance(prompt, str):
        yield prompt
    elif isinstance(prompt, list | tuple) and prompt and all(isinstance(t, int) for t in prompt):
        yield _decoded(list(prompt), decode)
    elif isinstance(prompt, list | tuple):
        for item in prompt:
            yield from _prompt_texts(item, decode)


def _decoded(token_ids: list[int], decode: Callable[[list[int]], str] | None) -> str:
    if decode is None:
        raise ValueError("a prompt of token ids needs a tokenizer to be scanned (pass decode=)")
    return decode(token_ids)


def _strings(value, skip_text: bool = False) -> Iterator[str]:
    """Every string in a JSON value (keys that name structure aside), walked without recursion: depth is the
    sender's to choose."""
    stack = [(value, skip_text)]
    while stack:
        item, skip = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            for key, child in reversed(list(item.items())):
                if isinstance(key, str) and not _STRUCTURE_WORD.fullmatch(key):
                    yield key  # a schema's property names, an arguments object's keys: text, unless a plain word
                if key in _STRUCTURE_KEYS and isinstance(child, str) and _STRUCTURE_WORD.fullmatch(child):
                    continue
                if skip and key == "text":
                    continue
                if key == "arguments" and isinstance(child, str):
                    stack.append((_json_value(child), False))
                if key == "pattern" and isinstance(child, str):
                    stack.append((_regex_literal(child), False))
                stack.append((child, False))
        elif isinstance(item, list | tuple):
            stack.extend((child, False) for child in reversed(item))


def _regex_literal(pattern: str) -> str:
    """A JSON schema's `pattern` as the text it spells: `^ann\\.b@x\\.com$` -> `ann.b@x.com`,
    `4111[ ]1111\\s1111` -> `4111 1111 1111` (escapes and one-character classes undone, anchors dropped)."""
    text = re.sub(r"\\s", " ", pattern)
    text = re.sub(r"\[(\\?.)\]", lambda m: m.group(1)[-1], text)
    text = re.sub(r"\\(.)", r"\1", text)
    return text.replace("^", " ").replace("$", " ")


def _json_value(arguments: str):
    """A tool call's arguments are JSON text, often with `\\uXXXX` escapes (Python's json.dumps writes
    full-width digits so): what it decodes to is scanned too."""
    if "\\u" not in arguments:
        return None
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return None

"""What of a request the PII detectors read: one function, run by the SDK before the wire and by the gateway.

`request_text(body)` takes an OpenAI chat or completions body (a dict, as
sent) and returns everything in it that would leave the device:
- every message of every role: its content (a string; or content parts,
  whose texts are read both joined with nothing, as the model reads them, and
  each on its own, so an address at the end of one part is not glued to the
  next part's first word; or one part given alone), and every other string in
  it (`name`, `tool_calls` names and arguments, an image part's URL, refusal
  text), and every number (a card number as an arguments value);
- the completions `prompt` in each accepted form (a string, strings, token
  ids, lists of token ids: ids are decoded with `decode`, so token ids are no
  way around the detectors), and `suffix`;
- every string and number of every other field (`stop`, `user`, `safety_identifier`,
  `metadata` but its `privacy` tags, `tools`, `functions`, `tool_choice`,
  `response_format` with each JSON schema `pattern` as the text it spells,
  `prediction`, and any field a caller adds): what is not read here could
  leave unscanned. `logit_bias` is skipped: its keys are token ids.
A string that is JSON text with escapes (a tool result or tool call
arguments written by `json.dumps`: `\\u` escapes for full-width digits, `\\t`)
is read decoded too. Keys and `type`/`role` values are structure, and
skipped, only when they are plain words (letters, `_`, `-`):
`{"type": "ann@example.com"}` is scanned. Messages and fields are joined
with a line break, so a number split across two messages reads as one (a
line break parts digit groups like a space).

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


_SCANNED_APART = frozenset({"messages", "prompt", "metadata", "logit_bias"})


def _pieces(body: Mapping, decode: Callable[[list[int]], str] | None) -> Iterator[str]:
    messages = body.get("messages") or ()
    for message in [messages] if isinstance(messages, str | Mapping) else messages:
        yield _message_text(message)
    yield from _prompt_texts(body.get("prompt"), decode)
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        yield from _strings({k: v for k, v in metadata.items() if k != "privacy"})
    for key, value in body.items():
        if key not in _SCANNED_APART:
            yield from _strings({key: value})


def _message_text(message) -> str:
    if not isinstance(message, Mapping):
        return "\n".join(_strings(message))
    pieces = []
    content = message.get("content")
    if isinstance(content, Mapping):
        content = [content]
    if isinstance(content, str):
        pieces += _strings(content)  # first, as the model reads it
    elif isinstance(content, list | tuple):
        texts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        # Parts are one text to the model ("ann@exam" + "ple.com" is an address), and each ends where it ends.
        pieces += ["".join(texts), *texts]
        pieces += [s for p in content for s in _strings(p, skip_text=True)]
    for key, value in message.items():
        if key != "content" or not isinstance(value, str | list | tuple | Mapping):
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
            if "\\" in item:
                stack.append((_json_value(item), False))
        elif isinstance(item, int | float) and not isinstance(item, bool):
            yield _number_text(item)  # a card number as a schema's enum, a default, an arguments value
        elif isinstance(item, Mapping):
            for key, child in reversed(list(item.items())):
                if isinstance(key, str) and not _STRUCTURE_WORD.fullmatch(key):
                    yield key  # a schema's property names, an arguments object's keys: text, unless a plain word
                if key in _STRUCTURE_KEYS and isinstance(child, str) and _STRUCTURE_WORD.fullmatch(child):
                    continue
                if skip and key == "text" and isinstance(child, str):
                    continue
                if key == "pattern" and isinstance(child, str):
                    stack.append((_regex_literal(child), False))
                stack.append((child, False))
        elif isinstance(item, list | tuple):
            stack.extend((child, False) for child in reversed(item))


def _number_text(number: int | float) -> str:
    """A JSON number as the digits it carries: `4111111111111111.0` and `4.111111111111111e+15` (how a float
    holding a card number prints) read as `4111111111111111`."""
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e30:
        return str(int(number))
    if isinstance(number, int) and number.bit_length() > 10_000:  # ~3,000 digits: no identifier, and past what
        return ""  # Python will print (int_max_str_digits)
    return str(number)


def _regex_literal(pattern: str) -> str:
    """A JSON schema's `pattern` as the text it spells: `^ann\\.b@x\\.com$` -> `ann.b@x.com`,
    `4111[ ]1111\\s1111` -> `4111 1111 1111` (escapes and one-character classes undone, anchors dropped)."""
    text = re.sub(r"\\s", " ", pattern)
    text = re.sub(r"\[(\\?.)\]", lambda m: m.group(1)[-1], text)
    text = re.sub(r"\\(.)", r"\1", text)
    return text.replace("^", " ").replace("$", " ")


def _json_value(text: str):
    """A string holding JSON text with escapes (`json.dumps` writes full-width digits as `\\uff14`, a tab as
    `\\t`): what it decodes to is scanned too. None for anything else."""
    if text.lstrip()[:1] not in ("{", "[", '"'):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None

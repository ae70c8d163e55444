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
  `metadata` in any shape, its `privacy` tags too, `tools`, `functions`, `tool_choice`,
  `response_format` with each JSON schema `pattern` as the text it spells,
  `prediction`, and any field a caller adds), and every key as json.dumps
  sends it (`{4111111111111111: ...}` goes as digits): what is not read here
  could leave unscanned. `logit_bias` keys that are token ids are skipped.
A string that is JSON text with escapes (a tool result or tool call arguments
written by `json.dumps`: `\\u` escapes for full-width digits, `\\t`) is read
decoded too; so is any string with escapes in it, undone wherever they are
(`Observation: {"card": "4111\\u00a01111…"}`, log lines, a printed Python
dict's `\\xa0`), three layers of escapes of escapes at once, up to 4 million
characters decoded in a request. Every object's value slot is also read after
what names it (`_slot_pairs`: `{"phoneNumbers": [{"type": "mobile", "value":
"…"}]}`), in JSON text with no escape too. Every key is read (`{"mobile":
"9876543210"}` reads as a label and its number) but `role`, `type`, `text`
and `content`; `type`/`role` values are structure, and skipped, only when
they are plain words (letters, `_`, `-`): `{"type": "ann@example.com"}` is
scanned. The messages' contents come first, one after another, then each
message's other fields; all are joined with a
line break, so a number split across two messages reads as one whatever else
a message carries (a line break parts digit groups like a space); an e-mail
address cut between two messages or batch prompts is read glued at the seam
as well (`_seams`).

The detectors then see the same text on the device and at the gateway.
"""

import functools
import json
import re
from collections.abc import Callable, Iterator, Mapping

from tandem_sdk.normalize import normalize

_STRUCTURE_KEYS = frozenset({"role", "type"})  # what says how, not what: skipped when the value is a plain word
_SHAPE_KEYS = frozenset({"role", "type", "text", "content"})  # the keys of every message and part: not read
# A value's slot beside its name (`{"name": "SSN", "value": "…"}`, `{"key": "mobile", "val": "…"}`): read, it would
# stand between the label and its number
_SLOT_KEYS = frozenset({"value", "val", "values", "data", "v"})
# Value slots a pair reads besides (lowered): Firestore's and DynamoDB's typed values, Lex's, forms' `fieldValue`
_PAIRED_SLOTS = _SLOT_KEYS | {
    "stringvalue",
    "integervalue",
    "s",
    "n",
    "interpretedvalue",
    "originalvalue",
    "fieldvalue",
}
_STRUCTURE_WORD = re.compile(r"[A-Za-z_-]{1,32}")  # "user", "function", "json_schema": no digit, no @, no dot


def request_text(body: Mapping, decode: Callable[[list[int]], str] | None = None) -> str:
    """Every piece of text in a chat or completions request body that leaves with it (a body that is no JSON object,
    such as a list: every string in it, where a caller's mistake raised AttributeError before)."""
    if not isinstance(body, Mapping):
        return "\n".join(_strings(body))
    return "\n".join(_pieces(body, decode))


_SCANNED_APART = frozenset({"messages", "prompt", "logit_bias"})
_TOKEN_ID = re.compile(r"[0-9]{1,10}")


def _pieces(body: Mapping, decode: Callable[[list[int]], str] | None) -> Iterator[str]:
    messages = body.get("messages") or ()
    messages = messages if isinstance(messages, list | tuple) else [messages]  # one message, or any other value
    parts = [_message_text(message) for message in messages]
    # Every message's content first, in order and one after the other, as the model reads them: a number split
    # over two messages stays one number whatever else a message carries (a `name`, a `tool_call_id`).
    yield "\n".join(content for content, _ in parts)
    yield from _seams([content for content, _ in parts])
    yield from (rest for _, rest in parts)
    yield from _prompt_texts(body.get("prompt"), decode)
    bias = body.get("logit_bias")
    if isinstance(bias, Mapping):  # token ids as keys: anything else in them is text that leaves
        yield from _strings([k for k in bias if not (isinstance(k, str) and _TOKEN_ID.fullmatch(k))])
    elif bias is not None:
        yield from _strings(bias)
    for key, value in body.items():
        if key not in _SCANNED_APART:
            yield from _strings({key: value})


def _message_text(message) -> tuple[str, str]:
    """A message's content as the model reads it, and the rest of its text (each part alone, other fields)."""
    if not isinstance(message, Mapping):
        return "\n".join(_strings(message)), ""
    content, rest = message.get("content"), []
    if isinstance(content, Mapping):
        content = [content]
    if isinstance(content, str):
        read, *decoded = _strings(content)  # as the model reads it; then decoded, where it is JSON text
        rest += decoded
    elif isinstance(content, list | tuple):
        texts = [
            text
            for p in content
            if isinstance(p, Mapping)
            for text in (p.get("text"), p.get("refusal"))  # an assistant's refusal part is read as its text too
            if isinstance(text, str)
        ]
        # Parts are one text to the model ("ann@exam" + "ple.com" is an address), and each ends where it ends.
        read = "".join(texts)
        # each part alone, and what JSON text or escapes in it spell, as a string content's
        rest += [
            *(s for text in texts for s in _strings(text)),
            *(s for p in content for s in _strings(p, skip_text=True)),
        ]
    else:
        read = ""
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:  # the model reads it after the content, as the turn's text
        read = f"{read}\n{refusal}" if read else refusal
    name = message.get("name")
    if isinstance(name, str) and name:  # the model reads it before the content (`SSN: 123456789`, a review), where
        read = f"{name}: {read}"  # the template drops names (serving/openai/chat_tokenizer.py) or beside it
    for key, value in message.items():
        if key != "content" or not isinstance(value, str | list | tuple | Mapping):
            rest += _strings({key: value})  # role and type skipped only as plain words
    return read, "\n".join(rest)


def _prompt_texts(prompt, decode: Callable[[list[int]], str] | None) -> Iterator[str]:
    if prompt is None:
        return
    if isinstance(prompt, str):
        yield from _strings(prompt)  # the prompt, then what its escapes spell
    elif isinstance(prompt, list | tuple) and prompt and all(isinstance(t, int) for t in prompt):
        yield _decoded(list(prompt), decode)
    elif isinstance(prompt, list | tuple):
        texts = []
        for item in prompt:
            read = list(_prompt_texts(item, decode))  # the prompt, then what its escapes spell
            texts.append(read[0] if read else "")
            yield from read
        yield from _seams(texts)


_MOST_SEAM_CHARS = 512  # an e-mail address is at most 254
_MOST_WINDOWS = 64  # seams a request's text gives a window around: people split an address once or twice
_WHOLE_DOMAIN = re.compile(r"[.．。｡][^\W\d_]{2,}\Z")  # the word ends in a top-level domain: `ann@example.com`


def _read(text: str) -> str:
    """A word as the detectors read its `@`: normalized where it may be written otherwise (`＠`, `﹫`, `&#64;`,
    `%40`)."""
    if text.isascii() and "&" not in text and "%" not in text:
        return text
    return _normalized(text)


@functools.lru_cache(maxsize=4096)
def _normalized(text: str) -> str:  # a batch of one-character prompts: each seam's word normalized once, not anew
    return normalize(text)


def _split_address(tail: str, head: str) -> bool:
    """An address cut at the seam, both sides as the detectors read them: the word before it has an `@` and no
    domain whole yet (`ann@exam`, `ann@`, `ann@example.c`), or the word after it starts with the `@` (`ann` +
    `@example.com`). Not `logo@3x.webp` and the next message's first word, which glued would read as an address
    of its own."""
    at = tail.rfind("@")
    if at != -1:
        return _WHOLE_DOMAIN.search(tail, at) is None
    return head.startswith("@")


def _seams(texts: list[str]) -> Iterator[str]:
    """Each word that runs from one text into the next with no space at a seam where an address may be cut, whole:
    an e-mail address split over two messages or prompts (`ann@exam` + `ple.com`, over three, or a minified JSON
    sent in pieces) reads as one. An empty text between parts nothing. The word is given whole once, when it ends,
    and around each seam that may cut an address (the first _MOST_WINDOWS of them), so what is given stays about the
    size of the texts (a batch of 150,000 `@` prompts gave a 512-character word at every seam: a review). Numbers
    need no such help: the line break that joins the texts parts digit groups as a space does."""
    chain: list[str] = []  # the running word's pieces, as sent
    tail = ""  # its last _MOST_SEAM_CHARS characters as the detectors read them, each piece normalized once
    split = False  # a seam in it may cut an address
    windows = _MOST_WINDOWS
    for text in texts:
        if not text:
            continue
        head = text.split(None, 1)[0] if not text[:1].isspace() else ""
        if chain and head:  # it runs on across this seam
            read = _read(head[:_MOST_SEAM_CHARS])
            if _split_address(tail, read):
                split = True
                if windows > 0:  # `ann@exam` + `ple.com` + `1`: the address, not only `ann@example.com1`
                    windows -= 1
                    yield tail + read
            chain.append(head)
            tail = (tail + read)[-_MOST_SEAM_CHARS:]
        elif chain:  # it ended at the seam
            if split:
                yield "".join(chain)
            chain, tail, split = [], "", False
        if head and len(head) == len(text):  # the text is one word: it runs on into the next text
            if not chain:
                chain, tail = [head], _read(head[-_MOST_SEAM_CHARS:])
            continue
        if split:
            yield "".join(chain)
        last = text.rsplit(None, 1)[-1] if not text[-1:].isspace() else ""
        chain, tail, split = ([last] if last else []), _read(last[-_MOST_SEAM_CHARS:]), False
    if split:
        yield "".join(chain)


def _decoded(token_ids: list[int], decode: Callable[[list[int]], str] | None) -> str:
    if decode is None:
        raise ValueError("a prompt of token ids needs a tokenizer to be scanned (pass decode=)")
    return decode(token_ids)


def _strings(value, skip_text: bool = False) -> Iterator[str]:
    """Every string in a JSON value (keys that name structure aside), walked without recursion: depth is the
    sender's to choose. A key is read right before its value (`ssn` then `123456789`, as a label before its number):
    every key of an object first, then the values, put a tool call's `{"name": "Ann", "ssn": "123456789"}` (its
    arguments as an object, as some clients send them) two lines from its label. Each object's value slot is also
    read beside what names it (`_slot_pairs`), and so is it in JSON text with no escape (a tool's result)."""
    stack, decoding = [(value, skip_text, None)], _MOST_DECODED
    while stack:
        item, skip, label = stack.pop()
        if isinstance(item, str):
            yield item
            if skip is _KEY:
                continue
            if "\\" in item and decoding > 0:  # what its escapes spell, as JSON and wherever they are
                decoding -= len(item)  # a chain of escapes of escapes reads no more than this in all
                stack.append((_json_value(item), False, None))
                if skip is not _UNESCAPED and (unescaped := _unescaped(item)) != item:
                    stack.append((unescaped, _UNESCAPED, None))  # not again: `\\x5cx5c…` would lose 3 characters a pass
            elif decoding > 0 and skip is not _PAIRED and (opener := _json_opener(item)) != -1:
                # JSON text with no escape is read as it is, but for the slots its objects name apart from their
                # values (`{"phoneNumbers": [{"type": "mobile", "value": "…"}]}` reads `value` between them), from
                # its first bracket (after a fence's ```json, an `Observation: `)
                decoding -= len(item)
                yield from _slot_pairs_in(_json_from(item, opener))
        elif isinstance(item, int | float) and not isinstance(item, bool):
            yield _number_text(item)  # a card number as a schema's enum, a default, an arguments value
        elif isinstance(item, Mapping):
            yield from _slot_pairs(item, label)
            for key, child in reversed(list(item.items())):  # each key pushed after its value: popped before it
                readable = isinstance(key, str) and key not in _SHAPE_KEYS and key not in _SLOT_KEYS
                if key in _STRUCTURE_KEYS and isinstance(child, str) and _STRUCTURE_WORD.fullmatch(child):
                    pass
                elif skip and key == "text" and isinstance(child, str):
                    pass
                else:
                    if key == "pattern" and isinstance(child, str):
                        stack.append((_regex_literal(child), False, None))
                    arguments = key == "arguments" and isinstance(child, str) and "\\" not in child
                    if arguments:
                        # A call's arguments are JSON text the chat template decodes and writes again:
                        # 4.111111111111111e15 reaches the model as 4111111111111111.0, so the decoded value is read too
                        # (with a backslash, the string's own walk below decodes it); its pairs with it, not again
                        stack.append((_json_any(child), False, None))
                    stack.append((child, _PAIRED if arguments else False, _label_of(key, label)))
                if not isinstance(key, str):  # json.dumps sends 4111111111111111 (or 1.5, True) as a key's text
                    number = isinstance(key, int | float) and not isinstance(key, bool)
                    stack.append((_number_text(key) if number else str(key), _KEY, None))
                elif readable:  # a schema's property names, an arguments object's keys; a label too
                    stack.append((key, _KEY, None))
        elif isinstance(item, list | tuple):
            yield from _jcard_pair(item)
            stack.extend((child, False, label) for child in reversed(item))


_PAIRED = "paired"  # a call's arguments, whose decoded value is walked: not read for pairs again
_MOST_OPENER = 200  # characters before JSON text's first bracket: a fence, `Observation: `, `200 OK`


def _json_opener(text: str) -> int:
    """Where JSON text may start in `text`: its first `{` or `[` within _MOST_OPENER characters; -1 if none."""
    head = text[:_MOST_OPENER]
    return min((i for i in (head.find("{"), head.find("[")) if i != -1), default=-1)


def _json_from(text: str, start: int):
    """The JSON value that starts at text[start] (what follows it, a fence's closing ```, is left); None if none."""
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except (ValueError, RecursionError):
        return None


# What names an object's value slot besides the key above it: `{"type": "mobile", "value": …}` (Google People),
# `{"label": "Mobile", "value": …}`, `{"Name": "custom:ssn", "Value": …}` (AWS), `{"key": "ssn", "val": …}`, FHIR's
# `{"system": "phone", "use": "mobile", "value": …}`
_NAMER_KEYS = frozenset(
    {"type", "kind", "label", "name", "key", "field", "fieldname", "title", "category", "attribute", "system", "use"}
)
_MOST_NAME = 64  # characters of a name or a slot's value read as a pair: a label is short, a phone number too
_MOST_NAMES, _MOST_SLOTS = 4, 2  # an object's: a few short lines each, whatever it holds
_PLURAL_NUMBERS = re.compile(r"(?i)(number)s\Z")  # `phoneNumbers` names each of them a `phoneNumber`


def _label_of(key, label: str | None) -> str | None:
    """The label the values under `key` carry: the key where it can name one, else the one above it."""
    if isinstance(key, str) and key not in _SHAPE_KEYS and key.lower() not in _PAIRED_SLOTS and len(key) <= _MOST_NAME:
        return key
    return label


def _slot_pairs(item: Mapping, label: str | None) -> Iterator[str]:
    """`<name>` then `<value>` on the next line, for each value slot of the object (`value`, `val`, `data`, a typed
    `stringValue`/`S`, …, in any case; `_slot_text`), and each name of it: the key above the object (`phoneNumbers`
    over `[{"type": "mobile", "value": …}]`, `phone` over `{"verified": true, "value": …}`) and the object's own
    naming keys' texts (`type`, `label`, `name`, `system`, …). Read in its place, a slot stood apart from them, after
    other keys (`verified`, `primary`, `id`). A few short lines an object, at most: what is read stays about the
    body's size."""
    values = [text for key, child in item.items() if isinstance(key, str) and key.lower() in _PAIRED_SLOTS
              if (text := _slot_text(child)) is not None][:_MOST_SLOTS]  # fmt: skip
    if not values:
        return
    names = [label] if label is not None else []
    names += [child for key, child in item.items() if isinstance(key, str) and key.lower() in _NAMER_KEYS
              and isinstance(child, str) and 0 < len(child) <= _MOST_NAME]  # fmt: skip
    for name in names[:_MOST_NAMES]:
        name = _PLURAL_NUMBERS.sub(r"\1", name)
        for text in values:
            yield f"{name}\n{text}"


def _slot_text(child) -> str | None:
    """A slot's value as a pair reads it: a short text with a digit or an `@` in it, or the one such value of an
    object (Apple's `{"stringValue": "…"}`); None for anything else. Not a JSON number: contacts and forms hold
    numbers as text (a leading 0, a +), and analytics' numbers are counts (`{"name": "mobile", "value": 12345678}`)."""
    if isinstance(child, Mapping) and len(child) == 1:
        (child,) = child.values()
    if isinstance(child, str) and 0 < len(child) <= _MOST_NAME and _PII_BEARING.search(child):
        return child
    return None


_PII_BEARING = re.compile(r"[0-9０-９@＠]")


def _jcard_pair(item: list | tuple) -> Iterator[str]:
    """A jCard property (RFC 7095: `["tel", {"type": ["cell"]}, "text", "4155550100"]`): its name, then its value."""
    if len(item) == 4 and isinstance(item[0], str) and isinstance(item[1], Mapping) and isinstance(item[2], str):
        if len(item[0]) <= _MOST_NAME and (text := _slot_text(item[3])) is not None:
            yield f"{item[0]}\n{text}"


def _slot_pairs_in(value) -> Iterator[str]:
    """The slot pairs (`_slot_pairs`) of every object in a decoded JSON value, walked without recursion."""
    stack = [(value, None)]
    while stack:
        item, label = stack.pop()
        if isinstance(item, Mapping):
            yield from _slot_pairs(item, label)
            stack.extend(
                (child, _label_of(key, label)) for key, child in item.items() if isinstance(child, Mapping | list)
            )
        elif isinstance(item, list):
            yield from _jcard_pair(item)
            stack.extend((child, label) for child in item if isinstance(child, Mapping | list))


def _number_text(number: int | float) -> str:
    """A JSON number as the digits it carries: `4111111111111111.0` and `4.111111111111111e+15` (how a float
    holding a card number prints) read as `4111111111111111`."""
    if isinstance(number, float) and number.is_integer() and abs(number) < 1e30:
        return int.__repr__(int(number))
    if isinstance(number, int) and number.bit_length() > 10_000:  # ~3,000 digits: no identifier, and past what
        return ""  # Python will print (int_max_str_digits)
    # As json.dumps writes it: an IntEnum is its digits, not its name
    return int.__repr__(number) if isinstance(number, int) else float.__repr__(number)


_REGEX_CODE = re.compile(r"x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|u\{([0-9a-fA-F]{1,6})\}")
_REGEX_COUNT = re.compile(r"\{(\d{1,6})(?:,(\d{0,6}))?\}")
_MOST_REPEATS = 64  # a count's repeats read; and a pattern spells at most 4 times its length and 64 characters more:
# `(a{1000}){1000}`, or a hundred patterns of `(1234 56 …){64}`, are no more text than a few times the body
_MOST_READ = 2_000  # characters of a pattern read as a regex; a longer one is read as text, escapes undone


def _regex_literal(pattern: str) -> str:
    """A JSON schema's `pattern` as the text it spells: `^ann\\.b@x\\.com$` -> `ann.b@x.com`,
    `^4111[- ]1111[- ]1111[- ]1111$` -> `4111-1111-1111-1111`, `^41{15}$` -> sixteen digits,
    `^(?:ann\\.lee)?\\x40example\\.com$` -> `ann.lee@example.com`. Character codes and escapes are undone, a
    class reads as its first character (`[- ]` as `-`, a digit as `#`, a negated one as a space), a count repeats
    what it follows (the least it allows, at least once; `?`, `*` and `+` once), groups and anchors are dropped, and
    an alternation's branches are read apart."""
    if len(pattern) > _MOST_READ:  # no schema's pattern is this long: read in linear time
        return _REGEX_ESCAPED.sub(lambda m: _regex_escape(m.group(), 1)[0], pattern)
    out: list[str] = []  # one string per atom, so a count repeats the atom before it
    groups: list[int] = []  # where each open group's atoms start
    i, size = 0, len(pattern)
    spelled = 0  # characters in out: a count repeats only while they stay under 64 + 4 * size
    while i < size:
        c = pattern[i]
        if c == "\\":
            atom, i = _regex_escape(pattern, i + 1)
            out.append(atom)
            spelled += len(atom)
        elif c == "[":
            atom, i = _regex_class(pattern, i + 1)
            out.append(atom)
            spelled += len(atom)
        elif c == "(":
            groups.append(len(out))
            i += 1
            # The opener is no text: (?<= (?<!, (?P<name> (?<name>, (?: (?= (?!
            if pattern.startswith(("?<=", "?<!"), i):
                i += 3
            elif pattern.startswith(("?P<", "?<"), i) and (close := pattern.find(">", i)) != -1:
                i = close + 1
            elif pattern.startswith("?", i):
                i += 2
        elif c == ")":
            start = groups.pop() if groups else 0
            out[start:] = ["".join(out[start:])]  # one atom: a count after it repeats the group
            i += 1
        elif c in "?*+":
            i += 1
        elif c == "{" and (count := _REGEX_COUNT.match(pattern, i)):
            times = min(max(int(count.group(1)), 1), _MOST_REPEATS)
            if out and spelled + len(out[-1]) * (times - 1) <= 64 + 4 * size:
                spelled += len(out[-1]) * (times - 1)
                out[-1] *= times
            i = count.end()
        elif c in "|^$":
            out.append(" ")
            i += 1
            spelled += 1
        else:
            out.append(c)
            i += 1
            spelled += 1
    return "".join(out)


def _regex_escape(pattern: str, i: int) -> tuple[str, int]:
    """The character an escape at pattern[i] (after its backslash) stands for, and where the pattern goes on."""
    if code := _REGEX_CODE.match(pattern, i):
        value = int(code.group(1) or code.group(2) or code.group(3), 16)
        return (chr(value) if value <= 0x10FFFF else "?"), code.end()
    c = pattern[i : i + 1]
    return _CLASS_ESCAPES.get(c, c), i + 1


# A digit class is no digit in particular: `#`. `^\+?[1-9]\d{7,14}$` (E.164) reads as `+#########`, no phone number;
# the digits a pattern writes out (`^41{15}$`) are read as written.
_CLASS_ESCAPES = {"s": " ", "d": "#", "w": "a", "t": "\t", "n": "\n", "r": "\r"}
_REGEX_ESCAPED = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)")


def _regex_class(pattern: str, i: int) -> tuple[str, int]:
    """A class at pattern[i] (after its `[`) as its first character (`#` for a digit, a space if negated), and where
    it ends."""
    negated = pattern.startswith("^", i)
    i += negated
    first, begin = "", i
    while i < len(pattern):
        c = pattern[i]
        if c == "]" and i > begin:  # a `]` first is a member (`[]a]`)
            i += 1
            break
        if c == "\\":
            atom, i = _regex_escape(pattern, i + 1)
        else:
            atom, i = c, i + 1
        first = first or atom
    return (" " if negated else "#" if first.isdigit() else first), i


_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|x([0-9a-fA-F]{2})|([nrtbf])|([\\/\"']))")
_CONTROL = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}


_UNESCAPED = "unescaped"  # a string's escapes already undone: only a JSON value in it is read on
_KEY = "key"  # an object's key: read as it is
_MOST_DECODED = 4_000_000  # characters of escaped text decoded in one request: twice the largest body
_ESCAPE_LAYERS = 3  # `\\\\u00a0` and the like: escapes of escapes, this deep, undone at once


def _unescaped(text: str) -> str:
    """Escapes undone wherever they are, in text that is no JSON value as a whole: a log line, an agent's
    `Observation: {"card": "4111\\u00a01111…"}`, a printed Python dict (`'4111\\xa01111…'`). The model reads the
    digits either way. A surrogate pair reads as its character; a lone one as "?"."""

    def one(match: re.Match[str]) -> str:
        code, wide, byte, control, itself = match.groups()
        if control:
            return _CONTROL[control]
        if itself:
            return itself
        value = int(code or wide or byte, 16)
        return chr(value) if value <= 0x10FFFF else "?"

    for _ in range(_ESCAPE_LAYERS):
        text, undone = _ESCAPE.subn(one, text)
        if not undone or "\\" not in text:
            break
    if any("\ud800" <= c <= "\udfff" for c in text):  # \ud83d\ude00: one character, as JSON means it
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").replace("\ufffd", "?")
    return text


def _json_any(text: str):
    """Any JSON value the text holds (a bare number too); None for anything else."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _json_value(text: str):
    """A string holding JSON text with escapes (`json.dumps` writes full-width digits as `\\uff14`, a tab as
    `\\t`): what it decodes to is scanned too. None for anything else."""
    if text.lstrip()[:1] not in ("{", "[", '"'):
        return None
    return _json_any(text)

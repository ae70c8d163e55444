"""Tool calling: tools into the prompt, the model's tool calls out of its text, and forced calls by grammar.

The format is the model's, chosen from its chat template (or `TANDEM_TOOL_FORMAT`):
- `hermes` (Hermes, Qwen2.5/3): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, one block per call;
- `mistral`: `[TOOL_CALLS]` then a JSON array of `{"name", "arguments"}`;
- `llama3_json` (Llama 3.1+): the whole answer is `{"name": ..., "parameters": {...}}` (after an optional
  `<|python_tag|>`), several separated by `;`.
The tools reach the model through its chat template (`tools=`, as `apply_chat_template` passes them);
a template that never reads `tools` gets them in a system message that describes the format.
`tool_choice: "required"` or a named function constrains decoding (an llguidance grammar: the call's
JSON follows the function's parameter schema), so the answer is a call; `auto` lets the model choose,
and `none` leaves the tools out of the answer (they are still shown to the model, as OpenAI does).
A streamed answer sends text as it comes until a call may be starting, then holds it back and sends
each parsed call as one `tool_calls` delta at the end (id, name and the whole arguments), which the
official clients and LangChain assemble like OpenAI's.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import llguidance

from serving.grammar import mistyped_field

FORMATS = ("hermes", "mistral", "llama3_json")
_HERMES_OPEN, _HERMES_CLOSE = "<tool_call>", "</tool_call>"
_MISTRAL_OPEN = "[TOOL_CALLS]"
_PYTHON_TAG = "<|python_tag|>"


class ToolError(ValueError):
    """The tools or tool_choice cannot be served as given: the request's fault."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str

    def as_openai(self, index: int | None = None) -> dict:
        call = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return call if index is None else {"index": index} | call


def format_for(template_source: str | None, override: str | None = None) -> str:
    if override:
        if override not in FORMATS:
            raise ValueError(f"TANDEM_TOOL_FORMAT must be one of {', '.join(FORMATS)}, got {override!r}")
        return override
    source = template_source or ""
    if _MISTRAL_OPEN in source:
        return "mistral"
    if _PYTHON_TAG in source or "ipython" in source:
        return "llama3_json"
    return "hermes"


TOOL_KEYS = frozenset({"type", "function"})
FUNCTION_KEYS = frozenset({"name", "description", "parameters", "strict"})


def functions(tools: list[dict]) -> dict[str, dict]:
    """name -> the function object, checked: every tool is {"type": "function", "function": {"name", ...}}."""
    out: dict[str, dict] = {}
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise ToolError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        for where, keys, known in ((f"tools[{i}]", tool, TOOL_KEYS), (f"tools[{i}].function", function, FUNCTION_KEYS)):
            if extra := sorted(set(keys) - known):  # ignored, `strict` beside `function` would go unchecked
                raise ToolError(f"{where}: unknown key{'s' if len(extra) > 1 else ''} {', '.join(extra)}; "
                                f"known: {', '.join(sorted(known))}")  # fmt: skip
        name = function.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ToolError(f"tools[{i}].function.name must be 1 to 64 letters, digits, _ . or -, got {name!r}")
        if (mistyped := mistyped_field(function, f"tools[{i}].function")) is not None:
            raise ToolError(mistyped)
        parameters = function.get("parameters")
        if parameters is None:  # absent or null (go-openai sends null): no arguments
            parameters = {}
        if not isinstance(parameters, dict):
            raise ToolError(f"tools[{i}].function.parameters must be a JSON schema object")
        if parameters.get("type", "object") != "object":  # arguments are a JSON object, as OpenAI's
            raise ToolError(
                f"tools[{i}].function.parameters must be a schema of type 'object' (the arguments are an object), "
                f"got type {parameters['type']!r:.40}"
            )
        for key in ("$defs", "definitions"):
            defs = parameters.get(key, {})
            if not isinstance(defs, dict) or not all(isinstance(d, dict) for d in defs.values()):
                raise ToolError(f"tools[{i}].function.parameters.{key} must be an object of JSON schemas")
        if name in out:
            raise ToolError(f"tools[{i}].function.name {name!r} is given twice")
        out[name] = function
    return out


def forced_names(tools: list[dict], tool_choice) -> list[str] | None:
    """The functions a call must be one of (tool_choice "required" or named); None when the model may answer text."""
    names = functions(tools)
    if tool_choice in (None, "auto", "none"):
        return None
    if tool_choice == "required":
        if not names:
            raise ToolError("tool_choice 'required' needs tools")
        return list(names)
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        if name not in names:
            raise ToolError(f"tool_choice names {name!r}, which is not among the tools")
        return [name]
    raise ToolError("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name'}}")


_NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


def _parameters(function: dict) -> dict:
    """The schema a function's arguments follow: no `parameters` is no arguments (OpenAI: "an empty parameter
    list"); `{}` is any object."""
    parameters = function.get("parameters")
    return _NO_PARAMETERS if parameters is None else parameters or {"type": "object"}


def grammar(tools: list[dict], names: list[str], fmt: str, parallel: bool, otherwise: dict | None = None) -> str:
    """An llguidance grammar whose every sentence is a call (or, with `parallel`, calls) to one of `names`, or,
    given `otherwise` (a JSON schema: response_format's), a text answer that follows it instead."""
    fns = functions(tools)
    key = "parameters" if fmt == "llama3_json" else "arguments"
    calls, definitions = [], {}
    for name in names:
        parameters, defs = _hoisted(_parameters(fns[name]), name)
        definitions |= defs
        calls.append(
            {
                "type": "object",
                "properties": {"name": {"const": name}, key: parameters},
                "required": ["name", key],
                "additionalProperties": False,
            }
        )
    call = {"anyOf": calls} if len(calls) > 1 else calls[0]
    call["x-guidance"] = {"whitespace_flexible": False}
    if definitions:  # a parameter schema's `$defs` (pydantic's nested models), now at the root its refs resolve from
        call["$defs"] = definitions
    repeat = "+" if parallel else ""
    if fmt == "hermes":
        lark = f'start: ("{_HERMES_OPEN}\\n" call "\\n{_HERMES_CLOSE}"){repeat}\ncall: %json {json.dumps(call)}'
    elif fmt == "mistral":
        array = {"type": "array", "items": call, "minItems": 1, "x-guidance": {"whitespace_flexible": False}}
        if not parallel:
            array["maxItems"] = 1
        lark = f'start: "{_MISTRAL_OPEN}" calls\ncalls: %json {json.dumps(array)}'
    else:
        more = ' ("; " call)*' if parallel else ""
        lark = f"start: call{more}\ncall: %json {json.dumps(call)}"
    if otherwise is not None:  # the calls' rule renamed, and the answer beside it (compact JSON, as the calls)
        answer = {**otherwise, "x-guidance": {"whitespace_flexible": False}}
        body = lark.removeprefix("start")
        lark = f"start: tool_calls_ | answer_\nanswer_: %json {json.dumps(answer)}\ntool_calls_{body}"
    return llguidance.LLMatcher.grammar_from_lark(lark)


def _hoisted(parameters: dict, function: str) -> tuple[dict, dict]:
    """The parameters without their `$defs`/`definitions`, which come back renamed `<function>.<name>` (two tools
    may both define `Address`), with every `$ref` to them rewritten."""
    defs = {**(parameters.get("definitions") or {}), **(parameters.get("$defs") or {})}
    if not defs:
        return parameters, {}
    renamed = {f"#/{where}/{name}": f"#/$defs/{function}.{name}" for where in ("$defs", "definitions") for name in defs}

    def rewrite(value):
        if isinstance(value, dict):
            return {
                k: renamed.get(v, v) if k == "$ref" and isinstance(v, str) else rewrite(v) for k, v in value.items()
            }
        if isinstance(value, list):
            return [rewrite(v) for v in value]
        return value

    body = rewrite({k: v for k, v in parameters.items() if k not in ("$defs", "definitions")})
    return body, {f"{function}.{name}": rewrite(schema) for name, schema in defs.items()}


def system_prompt(tools: list[dict], fmt: str) -> str:
    """For a template that never reads `tools`: what the model is told instead, in its own call format."""
    listing = "\n".join(json.dumps(f, ensure_ascii=False) for f in functions(tools).values())
    if fmt == "hermes":
        how = f'{_HERMES_OPEN}\n{{"name": <function name>, "arguments": <arguments object>}}\n{_HERMES_CLOSE}'
    elif fmt == "mistral":
        how = f'{_MISTRAL_OPEN}[{{"name": <function name>, "arguments": <arguments object>}}]'
    else:
        how = '{"name": <function name>, "parameters": <arguments object>}'
    return f"You may call these functions:\n{listing}\nTo call one, answer with exactly:\n{how}"


def template_messages(messages: list[dict]) -> list[dict]:
    """OpenAI messages as chat templates read them: a call's arguments as an object (HF's convention)."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [_template_call(call) for call in message["tool_calls"]]
        out.append(message)
    return out


def inline_calls(messages: list[dict], fmt: str) -> list[dict]:
    """For a template that never reads tools: an assistant's calls written into its content, in the model's format."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            written = [{"name": c["function"].get("name"), "arguments": c["function"].get("arguments")} for c in calls]
            if fmt == "hermes":
                text = "\n".join(
                    f"{_HERMES_OPEN}\n{json.dumps(c, ensure_ascii=False)}\n{_HERMES_CLOSE}" for c in written
                )
            elif fmt == "mistral":
                text = _MISTRAL_OPEN + json.dumps(written, ensure_ascii=False)
            else:
                text = "; ".join(
                    json.dumps({"name": c["name"], "parameters": c["arguments"]}, ensure_ascii=False) for c in written
                )
            message = {k: v for k, v in message.items() if k != "tool_calls"}
            message["content"] = ((message.get("content") or "") + "\n" + text).lstrip("\n")
        out.append(message)
    return out


def _template_call(call: dict) -> dict:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
            json.dumps(decoded, ensure_ascii=False).encode()  # an escaped lone surrogate (\ud800) decodes to no text
            function["arguments"] = decoded
        except (ValueError, RecursionError):  # not JSON (or nested past reason, or no text): the template gets the text
            pass
    return {**call, "function": function, "name": function.get("name"), "arguments": function.get("arguments")}


def strict_schemas(tools: list[dict]) -> dict[str, dict]:
    """name -> parameters, for the functions marked `strict: true`: their calls must follow the schema."""
    return {name: _parameters(f) for name, f in functions(tools).items() if f.get("strict")}


def parse(
    text: str,
    fmt: str,
    allowed: set[str],
    single: bool = False,
    follows: Callable[[str, str], bool] | None = None,
    cut: bool = False,
) -> tuple[str | None, list[ToolCall]]:
    """(the text outside calls, or None when there is none beside calls ("" for an empty answer without any, as
    OpenAI's); the calls: only the first with `single`, as
    parallel_tool_calls false asks). Text that is not a well-formed call to one of the tools, or (with `follows`,
    for strict functions) whose arguments do not follow its schema, stays text; but in an answer `cut` by
    max_tokens inside a call, the calls made so far are calls, as OpenAI returns them (cut_calls). Read as a stream
    is (StreamedCalls), so a whole answer's text is the streamed one's: the text before the first call as the model
    wrote it (`Sure!\n`), the rest as `StreamedCalls._read_held` reads it (the whole was stripped at its ends, a stream
    cannot take back what it sent: `Sure!` against `Sure!\n`, a review)."""
    held = StreamedCalls(fmt, allowed, single, follows)
    sent = held.push(text)
    rest, calls = held.finish_cut(cut)
    content = sent + rest
    return (content or None) if calls or (cut and content != text) else text, calls


def _parse(
    text: str, fmt: str, allowed: set[str], follows: Callable[[str, str], bool] | None
) -> tuple[str | None, list[ToolCall]]:
    if fmt == "hermes":
        content, raw = _parse_hermes(text)
    elif fmt == "mistral":
        content, raw = _parse_prefixed_array(text, _MISTRAL_OPEN)
    else:
        content, raw = _parse_llama3(text)
    calls = []
    for item in raw:
        if (call := _call_of(item, fmt, allowed, follows)) is None:
            return text or None, []
        calls.append(call)
    return (content, calls) if calls else (text, [])


_COMPACT = (",", ":")


def _call_of(item, fmt: str, allowed: set[str], follows: Callable[[str, str], bool] | None) -> ToolCall | None:
    """The call a decoded item is: a name among `allowed` and arguments (an object or JSON text) that follow the
    function's schema where it is strict; None otherwise."""
    name = item.get("name") if isinstance(item, dict) else None
    arguments = item.get("arguments", item.get("parameters")) if isinstance(item, dict) else None
    if name not in allowed or not isinstance(arguments, dict | str):
        return None
    # Compact, as OpenAI's and as a grammar writes them; the model's own spacing is not kept (docs/api.md).
    arguments = (
        arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, separators=_COMPACT)
    )
    if follows is not None and not follows(name, arguments):
        return None
    return ToolCall(name, arguments, call_id(fmt))


# A call's beginning cut before its name was whole: `{`, `{"na`, `{"name": "get_we`.
_NAME_NOT_YET = re.compile(r'\{\s*(?:"(?:n(?:a(?:m(?:e)?)?)?)?(?:"\s*(?::\s*(?:"(?:[^"\\]|\\.)*)?)?)?)?\s*')
_NAMED = re.compile(r'\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")')
_ARGUMENTS = re.compile(r'\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_BEFORE_ARGUMENTS = re.compile(r'\s*(?:,\s*(?:"[a-z]*"?)?)?\s*')
_SYNTAX = object()  # what a cut left of a call before its name: the model's syntax, no call


def cut_calls(
    text: str, fmt: str, allowed: set[str], follows: Callable[[str, str], bool] | None = None
) -> tuple[str, list[ToolCall]] | None:
    """An answer max_tokens cut inside its calls: (the text around them; the whole calls, then the cut one with its
    arguments as far as they got, where its name was written whole). OpenAI returns a cut call that way, and the
    model's call syntax never reaches the client as text. None where the answer does not end inside a call to one
    of the tools (prose naming the marker, JSON that is no call, an unknown tool, a strict call off its schema):
    its text then stays as it is."""
    marked = fmt != "llama3_json" or text.lstrip().startswith(_PYTHON_TAG)  # else `{"na` may begin a JSON answer
    if fmt == "llama3_json":
        body = text.strip().removeprefix(_PYTHON_TAG).lstrip()
        if not body.startswith("{"):
            return None
        texts, bodies = [], [body]
    else:
        marker = _HERMES_OPEN if fmt == "hermes" else _MISTRAL_OPEN
        start = text.find(marker)
        if start < 0:  # cut inside the marker itself ("<tool_"): that much of a call; a lone "<" is just text
            kept = _partial_suffix(text, marker)
            return (text[: len(text) - kept].strip(), []) if kept >= 2 else None
        texts, rest = [text[:start].strip()], text[start + len(marker) :]
        bodies = rest.split(_HERMES_OPEN) if fmt == "hermes" else [rest.lstrip().removeprefix("[")]
    calls, decoder = [], json.JSONDecoder()
    for index, body in enumerate(bodies):
        while body := body.strip().lstrip(",;").strip():  # mistral's array and llama's `;` hold several
            try:
                item, end = decoder.raw_decode(body)
            except ValueError:
                if index < len(bodies) - 1:  # words between two calls: text, as in a whole answer
                    texts.append(body)
                    break
                if any(m.startswith(body) for m in (_HERMES_CLOSE, _HERMES_OPEN, "]")):
                    break  # a closing or next marker cut halfway: syntax
                call = _cut_call(body, fmt, allowed, marked)
                if call is None:
                    return None
                if call is not _SYNTAX:
                    calls.append(call)
                break
            if (call := _call_of(item, fmt, allowed, follows)) is None:
                return None  # as in a whole answer: no call to one of the tools, so text
            calls.append(call)
            body = body[end:].strip().removeprefix(_HERMES_CLOSE)
    return "\n".join(t for t in texts if t), calls


def _cut_call(body: str, fmt: str, allowed: set[str], marked: bool):
    """The call a cut body begins (its arguments as far as they got; "" before them), _SYNTAX where the cut fell
    before its name was whole after a call's marker, None where it is no call to one of the tools."""
    named = _NAMED.match(body)
    if named is None:
        return _SYNTAX if marked and _NAME_NOT_YET.fullmatch(body) else None
    try:
        name = json.loads(named.group(1))
    except ValueError:  # an escape JSON does not know: no name, so no call
        return None
    if name not in allowed:
        return None
    rest = body[named.end() :]
    if arguments := _ARGUMENTS.match(rest):
        return ToolCall(name, rest[arguments.end() :], call_id(fmt))
    return ToolCall(name, "", call_id(fmt)) if _BEFORE_ARGUMENTS.fullmatch(rest) else None


_ALNUM = string.ascii_letters + string.digits


def call_id(fmt: str) -> str:
    """A new call's id: OpenAI's shape, or for Mistral's format the 9 letters and digits its templates insist on
    (they raise on any other id when the call comes back in the history)."""
    if fmt == "mistral":
        return "".join(secrets.choice(_ALNUM) for _ in range(9))
    return f"call_{uuid.uuid4().hex[:24]}"


def mistral_ids(messages: list[dict]) -> list[dict]:
    """The history with every call id as Mistral's templates take one: an id of 9 letters and digits as it is, any
    other (OpenAI's `call_…`, another provider's) as 9 drawn from its hash, the same for a call and its result."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = [{**c, "id": _nine(c["id"])} if isinstance(c.get("id"), str) else c for c in message["tool_calls"]]
            message = {**message, "tool_calls": calls}
        if isinstance(message.get("tool_call_id"), str):
            message = {**message, "tool_call_id": _nine(message["tool_call_id"])}
        out.append(message)
    return out


def _nine(call_id: str) -> str:
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    number = int.from_bytes(hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).digest()[:8], "big")
    digits = []
    for _ in range(9):
        number, digit = divmod(number, len(_ALNUM))
        digits.append(_ALNUM[digit])
    return "".join(digits)


def _parse_hermes(text: str) -> tuple[str, list]:
    content, items, rest = [], [], text
    while (start := rest.find(_HERMES_OPEN)) >= 0:
        content.append(rest[:start])
        body = rest[start + len(_HERMES_OPEN) :]
        try:
            item, end = json.JSONDecoder().raw_decode(body.lstrip())
        except ValueError:
            return text, []
        body = body.lstrip()[end:]
        items.append(item)
        rest = body.lstrip().removeprefix(_HERMES_CLOSE)
    content.append(rest)
    return "".join(content).strip(), items


def _parse_prefixed_array(text: str, marker: str) -> tuple[str, list]:
    start = text.find(marker)
    if start < 0:
        return text, []
    try:
        items, _ = json.JSONDecoder().raw_decode(text[start + len(marker) :].lstrip())
    except ValueError:
        return text, []
    return text[:start].strip(), items if isinstance(items, list) else [items]


def _parse_llama3(text: str) -> tuple[str, list]:
    body = text.strip().removeprefix(_PYTHON_TAG).strip()
    if not body.startswith("{"):
        return text, []
    items, decoder = [], json.JSONDecoder()
    while body:
        try:
            item, end = decoder.raw_decode(body)
        except ValueError:
            return text, []
        items.append(item)
        body = body[end:].strip().removeprefix(";").strip()
    return "", items


def markers(fmt: str) -> tuple[str, ...]:
    """Where a call may start in a streamed answer."""
    return {"hermes": (_HERMES_OPEN,), "mistral": (_MISTRAL_OPEN,), "llama3_json": (_PYTHON_TAG, "{")}[fmt]


def call_start(text: str, fmt: str) -> int:
    """Where the calls begin in an answer that made some: its first call marker."""
    return min((i for marker in markers(fmt) if (i := text.find(marker)) >= 0), default=0)


class StreamedCalls:
    """A streamed answer with tools: `push` returns the text safe to send now; `finish` the held-back rest as
    (text, calls). Log-probabilities wait with the text they describe (`logprobs`, `rest_logprobs`): a call's, the
    model's call syntax, are never sent."""

    def __init__(
        self,
        fmt: str,
        allowed: set[str],
        single: bool = False,
        follows: Callable[[str, str], bool] | None = None,
        calls_finish: str = "tool_calls",
    ) -> None:
        self.fmt, self.allowed, self.single, self.follows = fmt, allowed, single, follows
        self.calls_finish = calls_finish  # the finish reason of an answer its calls ended (ToolPlan.calls_finish)
        self._held = ""
        self._holding = False
        self._sent_any = False
        self._last_sent = ""  # the last character sent (text after calls is parted from it: `Sure.` `\nand then`)
        self._entries: list[dict] = []  # chat log-probability entries of the held text

    def logprobs(self, these: dict | None) -> dict | None:
        """After `push`: a chunk's log-probabilities (chat's object) to send now, with the text; none while text
        is held."""
        if these:
            self._entries += these["content"]
        if self._held or not self._entries:
            return None
        entries, self._entries = self._entries, []
        return {"content": entries, "refusal": None}

    def rest_logprobs(self, calls: list) -> dict | None:
        """After `finish`: the held text's log-probabilities, none where it was calls."""
        entries, self._entries = self._entries, []
        return {"content": entries, "refusal": None} if entries and not calls else None

    def push(self, text: str) -> str:
        sent = self._push(text)
        if sent:
            self._last_sent = sent[-1]
        return sent

    def _push(self, text: str) -> str:
        if self._holding:
            self._held += text
            return ""
        pending = self._held + text
        if self.fmt == "llama3_json":  # a call is the whole answer: decided by its first visible characters
            if self._sent_any:
                return pending
            stripped = pending.lstrip()
            if stripped.startswith(markers(self.fmt)):
                self._held, self._holding = pending, True
                return ""
            if any(marker.startswith(stripped) for marker in markers(self.fmt)):  # too early to tell
                self._held = pending
                return ""
            self._held, self._sent_any = "", True
            return pending
        start = min((i for m in markers(self.fmt) if (i := pending.find(m)) >= 0), default=-1)
        if start >= 0:
            self._held, self._holding = pending[start:], True
            return pending[:start]
        keep = max((_partial_suffix(pending, m) for m in markers(self.fmt)), default=0)
        self._held = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep]

    def finish(self, reason: str | None = None) -> tuple[str, list[ToolCall]]:
        """The held-back rest as (text, calls); `reason` the worker's finish reason ("length": cut mid-call)."""
        return self.finish_cut(reason == "length")

    def _read_held(self, cut: bool) -> tuple[str | None, list[ToolCall]]:
        """`parse` of what is held back: the answer from its first call's marker on."""
        text, fmt, allowed, follows = self._held, self.fmt, self.allowed, self.follows
        content, calls = _parse(text, fmt, allowed, follows)
        if not calls and cut and (made := cut_calls(text, fmt, allowed, follows)) is not None:
            content, calls = made
        elif calls and cut and content and fmt == "hermes":  # whole calls, then a marker cut halfway ("</tool_")
            kept = max(_partial_suffix(content, marker) for marker in (_HERMES_CLOSE, _HERMES_OPEN))
            content = content[: len(content) - kept].strip() if kept >= 2 else content
        calls = calls[:1] if self.single else calls
        return (content or None) if calls or (cut and content != text) else text, calls

    def finish_cut(self, cut: bool) -> tuple[str, list[ToolCall]]:
        if not self._holding:  # what is held is the start of a marker, or (llama3_json) too short to tell
            cut_in_marker = cut and self.fmt != "llama3_json" and len(self._held) >= 2
            return ("" if cut_in_marker else self._held), []
        content, calls = self._read_held(cut)
        if calls and content and not content[0].isspace() and self._last_sent and not self._last_sent.isspace():
            content = "\n" + content  # (the calls between parted them; read on its own, the rest was stripped)
        return (content or "", calls) if calls or content != self._held else (self._held, [])


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker` (held back: it may be a marker's start)."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0

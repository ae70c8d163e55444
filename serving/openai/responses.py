"""OpenAI's Responses API (`POST /v1/responses`) read into a chat request, and a chat answer written back as a
response, whole or as its stream of events.

A response is a chat completion underneath: the same tokenizing, privacy scan, routing, tools and grammars. What
the Responses API adds on top of chat, Tandem does not keep: nothing is stored, so `store: true`,
`previous_response_id` and `item_reference` items are 400s that say so. Text is the only modality. Every field is
honoured or refused by name, as on the chat route.
"""

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from serving.grammar import can_hold
from serving.openai.errors import BadRequest, refusal
from serving.openai.schemas import Items, JsonObject, Text, null_is_not_given

RESPONSE_ID_PREFIX = "resp_"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _unset_nulls(cls, data):
        """A null the official client's `model_dump()` writes for a field Tandem does not declare there (`phase` on
        a call, `caller`, `namespace`, `async_`, a tool's `defer_loading`, a part's `prompt_cache_breakpoint`, an
        output's `name`) is no input: an item given back as a dict reads as the item. (A declared optional field
        takes null as it is.) `parsed` and `parsed_arguments` (what `responses.parse()` adds: the text or arguments
        beside them, parsed) are no input either, whatever they hold, as on chat."""
        if isinstance(data, dict):
            declared = cls.model_fields.keys() | {f.alias for f in cls.model_fields.values() if f.alias}
            data = {k: v for k, v in data.items() if k not in _DERIVED and (v is not None or k in declared)}
        return data


_DERIVED = frozenset({"parsed", "parsed_arguments"})


class _TextPart(_Strict):
    """A text part of an input message: `input_text` (what a user, system or developer says), or `output_text` and
    `refusal` (an assistant's earlier answer, as a response's `output` gives it back)."""

    type: Literal["input_text", "output_text", "refusal"]
    text: Text | None = None
    refusal: Text | None = None
    annotations: Annotated[list, Field(max_length=0)] | None = None  # as Tandem writes them: none
    logprobs: list | None = None  # an earlier answer's, given back with it: not the model's input

    @model_validator(mode="after")
    def _its_own_text(self):
        """A text part carries `text`, a refusal part `refusal`: neither is left empty, neither carries the other."""
        has, other = ("refusal", "text") if self.type == "refusal" else ("text", "refusal")
        if getattr(self, has) is None:
            raise ValueError(f"a part of type {self.type!r} needs {has}")
        if getattr(self, other) is not None:
            raise ValueError(f"a part of type {self.type!r} carries {has}, not {other}")
        return self


def _text_parts(value):
    """Content as text parts only, each read here: another part (an image, a file, audio) or a part's problem is
    named once, not listed beside the string the content might have been."""
    if not isinstance(value, list):
        return value
    parts = []
    for i, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "refusal"):
            shown = repr(kind)[:40] if isinstance(kind, str) else "none" if kind is None else "not text"
            raise ValueError(f"part {i} of type {shown} is not served: text only (input_text, output_text, refusal)")
        try:
            parts.append(_TextPart.model_validate(part))
        except ValidationError as exc:
            raise ValueError(
                f"part {i}: {refusal(exc.errors(include_url=False)).message.removeprefix('body: ')}"
            ) from None
    return parts


_STATUS = Literal["in_progress", "completed", "incomplete"]


class _Message(_Strict):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Text | Items[_TextPart]
    id: Text | None = None
    status: _STATUS | None = None
    phase: Literal["commentary", "final_answer"] | None = None  # an earlier answer's, resent as the SDK asks

    @field_validator("content", mode="before")
    @classmethod
    def _text_only(cls, value):
        return _text_parts(value)


class _FunctionCall(_Strict):
    type: Literal["function_call"]
    call_id: Text
    name: Text
    arguments: Text
    id: Text | None = None
    status: _STATUS | None = None


class _FunctionCallOutput(_Strict):
    type: Literal["function_call_output"]
    call_id: Text
    output: Text | Items[_TextPart]
    id: Text | None = None
    status: _STATUS | None = None

    @field_validator("output", mode="before")
    @classmethod
    def _text_only(cls, value):
        return _text_parts(value)


_ITEMS = {"message": _Message, "function_call": _FunctionCall, "function_call_output": _FunctionCallOutput}
MAX_INPUT_ITEMS = 2048


class _FunctionTool(_Strict):
    type: Literal["function"]
    name: Text
    description: Text | None = None
    parameters: JsonObject | None = None
    strict: bool | None = None


class _NamedFunction(_Strict):
    type: Literal["function"]
    name: Text


class _TextFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: Text | None = None
    schema_: JsonObject | None = Field(default=None, alias="schema")
    description: Text | None = None
    strict: bool | None = None

    @model_validator(mode="after")
    def _a_schema_is_named(self):
        if self.type == "json_schema" and (self.name is None or self.schema_ is None):
            raise ValueError("a json_schema format needs name and schema")
        if self.type != "json_schema":  # as OpenAI: they were dropped, and echoed back as if applied
            for key in ("name", "schema_", "description", "strict"):
                if getattr(self, key) is not None:
                    raise ValueError(f"a {self.type} format takes only type; {key.rstrip('_')} is json_schema's")
        return self


class _TextConfig(_Strict):
    format: _TextFormat | None = None


class _StreamOptions(_Strict):
    include_obfuscation: Literal[False] | None = Field(default=None, description="events are never padded")


_NOT_KEPT = "Tandem keeps no responses"


# Fields of OpenAI's Responses API that Tandem cannot honour: (a value it can take, why any other is refused)
_LIMITED = {
    "store": ((None, False), f"{_NOT_KEPT}: store can only be false"),
    "previous_response_id": ((None,), f"{_NOT_KEPT}: send the earlier turns and outputs in input"),
    "conversation": ((None,), f"{_NOT_KEPT} and no conversations: send the earlier turns in input"),
    "background": ((None, False), "background responses are not served: stream instead"),
    "reasoning": ((None,), "reasoning options are not served: the models here do not reason in tokens of their own"),
    "include": ((None, []), "nothing more can be included (no reasoning, searches, images or log-probabilities)"),
    "truncation": ((None, "disabled"), "truncation can only be disabled: a prompt over the context is a 400"),
    "prompt": ((None,), "stored prompt templates are not served: send the text in instructions and input"),
    "max_tool_calls": ((None,), "not supported by Tandem"),
    "top_logprobs": ((None,), "not supported by Tandem on /v1/responses (use /v1/chat/completions)"),
}


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)  # extras are refused by name: refused_field()

    model: str
    input: Text | Annotated[Items[JsonObject], Field(max_length=MAX_INPUT_ITEMS)] = Field(
        description="text, or input items: messages, function calls and outputs"
    )
    instructions: Text | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    stream: bool = False
    stream_options: _StreamOptions | None = None
    tools: Items[JsonObject] | None = None
    tool_choice: Literal["none", "auto", "required"] | _NamedFunction | None = None
    parallel_tool_calls: bool | None = None
    text: _TextConfig | None = None
    metadata: JsonObject | None = None
    user: Text | None = None
    safety_identifier: Text | None = None
    prompt_cache_key: Text | None = None
    prompt_cache_retention: Literal["in_memory", "in-memory"] | None = None
    service_tier: Literal["auto", "default"] | None = None
    # Tandem's extensions, as on the chat route
    seed: int | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    priority: int | None = None

    def refused_field(self) -> tuple[str, str] | None:
        """(the field, why) for the first field set that Tandem cannot honour or does not know; None if none."""
        for name, value in (self.model_extra or {}).items():
            if name in _LIMITED:
                allowed, why = _LIMITED[name]
                if not any(value is a or (value == a and type(value) is type(a)) for a in allowed):
                    return name, f"{name}: {why}"
        unknown = [name for name in self.model_extra or {} if name not in _LIMITED]
        if unknown:
            return unknown[0], f"unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)[:300]}"
        return None

    @model_validator(mode="before")
    @classmethod
    def _null_is_not_given(cls, data):
        """`"stream": null` (what a client sends for a parameter it leaves at None) is the default, as on chat."""
        return null_is_not_given(cls, data)

    def items(self) -> list["_Message | _FunctionCall | _FunctionCallOutput"]:
        """The input as items, each read as what its `type` says (a message when it has none); a problem is a 400
        naming the item (`input[3]`)."""
        if isinstance(self.input, str):
            return [_Message(role="user", content=self.input)]
        if not self.input:
            raise BadRequest("input must not be empty", param="input")
        items = []
        for i, item in enumerate(self.input):
            kind = item.get("type", "message")
            if kind is None and isinstance(item, dict):  # null, as `model_dump()` writes an EasyInputMessage's
                item, kind = {k: v for k, v in item.items() if k != "type"}, "message"
            if kind == "item_reference":
                raise BadRequest(
                    f"input[{i}]: an item_reference needs a stored response, and {_NOT_KEPT}", param=f"input[{i}]"
                )
            if not isinstance(kind, str) or kind not in _ITEMS:
                shown = repr(kind)[:40] if isinstance(kind, str) else "not a string"
                raise BadRequest(
                    f"input[{i}].type {shown} is not served (message, function_call, function_call_output)",
                    param=f"input[{i}].type",
                )
            items.append(_validated(_ITEMS[kind], item, f"input[{i}]"))
        return items

    def functions(self) -> list[_FunctionTool]:
        tools = []
        for i, tool in enumerate(self.tools or ()):
            kind = tool.get("type")
            if kind != "function":
                shown = repr(kind)[:40] if isinstance(kind, str) else "not a string"
                raise BadRequest(f"tools[{i}]: only function tools are served (not {shown})", param=f"tools[{i}].type")
            tools.append(_validated(_FunctionTool, tool, f"tools[{i}]"))
        return tools

    @field_validator("stream_options")
    @classmethod
    def _needs_stream(cls, value, info):
        if value is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed with stream: true")
        return value

    def chat_request(self) -> tuple[dict, list[str]]:
        """The chat request this response is answered by, and where each of its messages came from (`instructions`
        or `input[i]`), to name the right field when the chat request is refused."""
        messages, origins = [], []
        if self.instructions is not None:
            messages.append({"role": "system", "content": self.instructions})
            origins.append("instructions")
        for i, item in enumerate(self.items()):
            origin = "input" if isinstance(self.input, str) else f"input[{i}]"
            if isinstance(item, _Message):
                messages.append({"role": item.role, "content": _chat_content(item.content)})
                origins.append(origin)
            elif isinstance(item, _FunctionCall):
                call = {
                    "id": item.call_id,
                    "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments},
                }
                last = messages[-1] if messages else None
                if last is not None and last["role"] == "assistant" and origins[-1] != "instructions":
                    last.setdefault("tool_calls", []).append(call)  # calls after the turn's text are that turn's
                else:
                    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                    origins.append(origin)
            else:
                messages.append({"role": "tool", "tool_call_id": item.call_id, "content": _chat_content(item.output)})
                origins.append(origin)
        chat: dict[str, Any] = {"model": self.model, "messages": messages, "stream": self.stream}
        if self.stream:
            chat["stream_options"] = {"include_usage": True}  # for the usage of response.completed
        given = {
            "max_completion_tokens": self.max_output_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "parallel_tool_calls": self.parallel_tool_calls if self.tools else None,  # the Responses API takes it alone
            "metadata": self.metadata,
            "user": self.user,
            "safety_identifier": self.safety_identifier,
            "prompt_cache_key": self.prompt_cache_key,
            "prompt_cache_retention": self.prompt_cache_retention,
            "service_tier": self.service_tier,
            "seed": self.seed,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "priority": self.priority,
        }
        chat |= {k: v for k, v in given.items() if v is not None}
        if self.tools:
            chat["tools"] = [_chat_tool(tool) for tool in self.functions()]
        if self.tool_choice is not None:
            choice = self.tool_choice
            chat["tool_choice"] = (
                choice if isinstance(choice, str) else {"type": "function", "function": {"name": choice.name}}
            )
        if self.text is not None and self.text.format is not None:
            chat["response_format"] = _response_format(self.text.format)
        return chat, origins


def _validated(model: type[BaseModel], value: dict, where: str):
    """`value` as `model`; a 400 naming the first problem's field under `where` (`input[3].role`)."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problem = refusal(exc.errors(include_url=False))
        if problem.param in (None, "body"):
            raise BadRequest(f"{where}: {problem.message.removeprefix('body: ')}", param=where) from None
        raise BadRequest(f"{where}.{problem.message}", param=f"{where}.{problem.param}") from None


def _chat_content(content: str | list[_TextPart]) -> str | list[dict]:
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.type == "refusal":
            parts.append({"type": "refusal", "refusal": part.refusal or ""})
        else:
            parts.append({"type": "text", "text": part.text or ""})
    return parts


def _chat_tool(tool: _FunctionTool) -> dict:
    function = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    function["strict"] = _strict(tool)
    return {"type": "function", "function": function}


def _strict(tool: _FunctionTool) -> bool:
    """Strict unless it says not, the Responses API's default (its calls went free of the schema: a review); left
    out, and with a schema no answer can be held to (`uniqueItems`, a look-ahead), not strict, as OpenAI then
    serves it, where it was a 400 (a second review)."""
    if tool.strict is not None:
        return tool.strict
    return tool.parameters is None or can_hold(tool.parameters or {"type": "object"})


def _response_format(fmt: _TextFormat) -> dict:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    schema = {"name": fmt.name or "response", "schema": fmt.schema_ or {}}
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    if fmt.description is not None:
        schema["description"] = fmt.description
    return {"type": "json_schema", "json_schema": schema}


_CHAT_WORDS = {
    "a tool message": "a function_call_output",
    "an assistant's message (one with tool_calls)": "a function_call",
    "an assistant's message with tool_calls": "a function_call",
    "response_format.json_schema": "text.format",  # (name, schema, strict: in text.format itself)
}
_CHAT_PARAMS = {
    "messages": "input",
    "max_completion_tokens": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "response_format": "text.format",
}
_MESSAGE_INDEX = re.compile(r"messages\[(\d+)\]|messages\.(\d+)")
_TOOL_FUNCTION = re.compile(r"tools(\[\d+\]|\.\d+)\.function\b")  # chat's tools[i].function.x is tools[i].x
_QUOTED = re.compile(r"('[^']*')")  # a name the caller chose, as our messages quote it: left as it is


def responses_words(text: str | None, origins: list[str]) -> str | None:
    """A chat refusal's words (its message or its `param`) in the request's own terms: `messages[2]` is the input
    item it came from, `max_completion_tokens` is `max_output_tokens`. Quoted names are the caller's own: kept."""
    if text is None:
        return None

    def item(match: re.Match) -> str:
        index = int(match.group(1) or match.group(2))
        return origins[index] if index < len(origins) else "input"

    def ours(piece: str) -> str:
        piece = _TOOL_FUNCTION.sub(lambda m: f"tools{m.group(1)}", _MESSAGE_INDEX.sub(item, piece))
        for chat, words in _CHAT_WORDS.items():
            piece = piece.replace(chat, words)
        for chat, field in _CHAT_PARAMS.items():
            piece = re.sub(rf"\b{chat}\b", field, piece)
        return piece

    return "".join(piece if i % 2 else ours(piece) for i, piece in enumerate(_QUOTED.split(text)))


def _ids() -> Iterator[str]:
    while True:
        yield uuid.uuid4().hex[:24]


def _envelope(request: ResponsesRequest, response_id: str, created_at: int) -> dict:
    """The fields every response object carries, as the request set them."""
    fmt = request.text.format if request.text is not None and request.text.format is not None else None
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "model": request.model,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": request.metadata or {},
        # as served: left out, an answer the model chooses may hold several calls, a forced one holds one (answer.py)
        "parallel_tool_calls": (
            request.parallel_tool_calls
            if request.parallel_tool_calls is not None
            else request.tool_choice in (None, "auto", "none")
        ),
        "previous_response_id": None,
        "store": False,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True) if fmt is not None else {"type": "text"}},
        "tool_choice": (
            request.tool_choice.model_dump() if isinstance(request.tool_choice, BaseModel) else request.tool_choice
        )
        or "auto",
        "tools": [tool.model_dump(exclude_none=True) | {"strict": _strict(tool)} for tool in request.functions()],
        "truncation": "disabled",
        "user": request.user,
        "safety_identifier": request.safety_identifier,
        "error": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
        "status": "in_progress",
    }


def _usage(usage: dict) -> dict:
    return {
        "input_tokens": usage["prompt_tokens"],
        # No cache write is asked for in so many words here (prefixes are cached as they come): none to count
        "input_tokens_details": {
            "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            "cache_write_tokens": 0,
        },
        "output_tokens": usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
    }


def _ended(response: dict, finish_reason: str, usage: dict | None) -> dict:
    """The response as its answer ended; cut by max_output_tokens, its last item is incomplete too."""
    cut = finish_reason == "length"
    if cut and response["output"]:
        response["output"] = [*response["output"][:-1], response["output"][-1] | {"status": "incomplete"}]
    return response | {
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "usage": _usage(usage) if usage is not None else None,
    }


def _message_item(item_id: str, text: str, status: str) -> dict:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def _call_item(item_id: str, call: dict, status: str) -> dict:
    function = call["function"]
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"],
        "status": status,
    }


def response_object(request: ResponsesRequest, chat: dict) -> dict:
    """A whole chat answer (one choice) as a response."""
    ids = _ids()
    choice = chat["choices"][0]
    message, finish = choice["message"], choice["finish_reason"]
    status = "incomplete" if finish == "length" else "completed"
    output = []
    if message.get("content"):
        output.append(_message_item(f"msg_{next(ids)}", message["content"], status))
    output += [_call_item(f"fc_{next(ids)}", call, "completed") for call in message.get("tool_calls") or ()]
    response = _envelope(request, response_id_of(chat["id"]), chat["created"]) | {"output": output}
    return _ended(response, finish, chat.get("usage")) | {"completed_at": int(time.time())}


def response_id_of(chat_id: str) -> str:
    return RESPONSE_ID_PREFIX + chat_id.rpartition("-")[2]


class ResponseEvents:
    """A chat answer's server-sent events (`data: {chunk}`, an error, `[DONE]`) as the Responses API's: created,
    in_progress, each output item's added / delta / done, then completed (or incomplete, cut by
    max_output_tokens) with the usage; a failure mid-answer is an `error` event and `response.failed`."""

    def __init__(self, request: ResponsesRequest) -> None:
        self._request = request
        self._sequence = 0
        self._ids = _ids()
        self._response: dict | None = None
        self._output: list[dict] = []
        self._text: list[str] | None = None  # the message item's text while it is open
        self._calls: list[dict] = []  # the answer's calls, until its finish
        self._finish: str | None = None

    def _event(self, kind: str, **fields) -> str:
        event = {"type": kind, "sequence_number": self._sequence} | fields
        self._sequence += 1
        return f"event: {kind}\ndata: {json.dumps(event, ensure_ascii=False, separators=(',', ':'))}\n\n"

    async def translate(self, chat_events: AsyncIterator[str | bytes]) -> AsyncIterator[str]:
        try:
            async for raw in chat_events:
                text = raw.decode() if isinstance(raw, bytes) else raw
                for line in text.splitlines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    for event in self._on(json.loads(line[len("data: ") :])):
                        yield event
        finally:  # the client left, or the answer ended: the chat stream closes too (and frees the worker's sequence)
            await chat_events.aclose()

    def _on(self, chunk: dict) -> Iterator[str]:
        if "error" in chunk:
            yield from self._failed(chunk["error"])
            return
        if self._response is None:
            self._response = _envelope(self._request, response_id_of(chunk["id"]), chunk["created"])
            yield self._event("response.created", response=self._response)
            yield self._event("response.in_progress", response=self._response)
        if chunk.get("usage"):
            yield from self._completed(chunk["usage"])
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                yield from self._text_delta(delta["content"])
            self._calls += delta.get("tool_calls") or ()  # written once the finish says whether the last was cut
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                yield from self._close_message()
                yield from self._write_calls()

    def _text_delta(self, text: str) -> Iterator[str]:
        if self._text is None:
            self._text, item_id = [], f"msg_{next(self._ids)}"
            self._output.append(_message_item(item_id, "", "in_progress") | {"content": []})
            yield self._event("response.output_item.added", output_index=len(self._output) - 1, item=self._output[-1])
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield self._event(
                "response.content_part.added", item_id=item_id, output_index=len(self._output) - 1, content_index=0,
                part=part,
            )  # fmt: skip
        self._text.append(text)
        yield self._event(
            "response.output_text.delta", item_id=self._output[-1]["id"], output_index=len(self._output) - 1,
            content_index=0, delta=text, logprobs=[],
        )  # fmt: skip

    def _close_message(self) -> Iterator[str]:
        if self._text is None:
            return
        index = next(i for i, item in enumerate(self._output) if item["type"] == "message")
        item_id, text = self._output[index]["id"], "".join(self._text)
        status = "incomplete" if self._finish == "length" else "completed"
        self._text = None
        yield self._event(
            "response.output_text.done", item_id=item_id, output_index=index, content_index=0, text=text, logprobs=[]
        )
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        yield self._event("response.content_part.done", item_id=item_id, output_index=index, content_index=0, part=part)
        self._output[index] = _message_item(item_id, text, status)
        yield self._event("response.output_item.done", output_index=index, item=self._output[index])

    def _write_calls(self) -> Iterator[str]:
        """The answer's calls, each its own item after the text; cut by max_output_tokens, the last is incomplete."""
        calls, self._calls = self._calls, []
        for k, call in enumerate(calls):
            cut = self._finish == "length" and k == len(calls) - 1
            item_id, index = f"fc_{next(self._ids)}", len(self._output)
            done = _call_item(item_id, call, "incomplete" if cut else "completed")
            self._output.append(done)
            yield self._event(
                "response.output_item.added", output_index=index, item=done | {"arguments": "", "status": "in_progress"}
            )
            yield self._event(
                "response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=done["arguments"]
            )
            yield self._event(
                "response.function_call_arguments.done", item_id=item_id, output_index=index, name=done["name"],
                arguments=done["arguments"],
            )  # fmt: skip
            yield self._event("response.output_item.done", output_index=index, item=done)

    def _completed(self, usage: dict) -> Iterator[str]:
        yield from self._close_message()
        yield from self._write_calls()
        response = _ended(self._response | {"output": self._output}, self._finish or "stop", usage)
        response["completed_at"] = int(time.time())
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        yield self._event(kind, response=response)

    def _failed(self, error: dict) -> Iterator[str]:
        """An `error` event, then `response.failed` with what had been written (the text so far, incomplete)."""
        yield self._event("error", code=error.get("code"), message=error.get("message", ""), param=error.get("param"))
        if self._response is None:
            return
        output = list(self._output)
        if self._text is not None:  # the message was being written: its text so far
            index = next(i for i, item in enumerate(output) if item["type"] == "message")
            output[index] = _message_item(output[index]["id"], "".join(self._text), "incomplete")
        code = "invalid_prompt" if error.get("code") == "invalid_request" else "server_error"  # OpenAI's codes
        failed = self._response | {
            "output": output,
            "status": "failed",
            "error": {"code": code, "message": error.get("message", "")},
        }
        yield self._event("response.failed", response=failed)

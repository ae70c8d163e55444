"""OpenAI request bodies as pydantic models, with Tandem's extensions (top_k, priority) and vLLM's
(min_p, repetition_penalty, ignore_eos, stop_token_ids).

No field is silently dropped. Every field is either honoured, or one that cannot change the answer
(`user`, `store: false`, `service_tier`, `prompt_cache_key`, ...: declared below with the values that
cannot), or refused with a 400 that names it: OpenAI's fields Tandem does not serve (`UNSUPPORTED`) say
so, any other name is an unknown field.
"""

import functools
import math
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from serving.checkpoint import SAMPLING_FIELDS, GenerationDefaults
from serving.engine_api import MAX_TOP_LOGPROBS, MIN_REPETITION_PENALTY, MIN_TEMPERATURE
from serving.grammar import grammar_for

# OpenAI's fields Tandem does not serve yet, with the values that ask for nothing (accepted as absent).
UNSUPPORTED: dict[str, tuple] = {
    "functions": ([],),
    "function_call": ("none",),
    "audio": (),
    "prediction": (),
    "reasoning_effort": (),
    "verbosity": (),
    "web_search_options": (),
    "best_of": (1,),
    "suffix": ("",),
}
MAX_LOGIT_BIAS = 300
MAX_TOOLS = 128
MAX_N = 128  # the schema's bound; the gateway's own cap (TANDEM_MAX_N) is checked against its settings
MAX_STOP_TOKEN_IDS = 64
MAX_STOP_CHARS = 256
MAX_STOP_SEQUENCES = 4
MAX_MESSAGES = 2048
# A nucleus this small holds the most likely token alone whatever the model (its probability is at least 1/vocabulary,
# and no vocabulary has a million tokens): greedy, as 0 is. Below ~1e-45, float32 would read it as 0, "off".
MIN_TOP_P = 1e-6


def _valid_unicode(value: str) -> str:
    """JSON can carry a lone surrogate (\\ud800); no tokenizer and no wire format can."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid Unicode: a lone surrogate {value[exc.start]!r} at {exc.start}") from None
    return value


Text = Annotated[str, AfterValidator(_valid_unicode)]

T = TypeVar("T")
# A list in a request: its first wrong item refuses it. Every wrong item was an error of its own (one per type a
# union tried): a 2 MB prompt of 500,000 floats was 1.5 million errors, 10 s of the interpreter's lock before the 400,
# and every other request waited (a review); a request's 400 names its first problems anyway.
Items = Annotated[list[T], Field(fail_fast=True)]


def _valid_json_tree(value: dict) -> dict:
    """`_valid_unicode` for every key and string in a JSON object (tools, arguments objects, response_format,
    metadata): a lone surrogate there reached the tokenizer, the grammar compiler or the span exporter as a 500. And
    every number finite: Python's JSON reads `NaN`, `Infinity` and `1e999` (which JSON allows) as no number JSON can
    write, and a tool's `maximum: 1e999` was a 500 from /v1/responses' envelope, or a grammar compiler's riddle (a
    review)."""
    stack: list = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _valid_unicode(item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{item} is not a number JSON can carry (NaN, Infinity, or past a double's range)")
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    _valid_unicode(key)
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_valid_json_tree)]


@functools.cache
def _defaulted_fields(model: type[BaseModel]) -> frozenset[str]:
    """The optional fields whose default is not None: `null` for one of them means "not given"."""
    return frozenset(n for n, f in model.model_fields.items() if not f.is_required() and f.default is not None)


def null_is_not_given(model: type[BaseModel], data):
    """OpenAI takes `null` for an optional parameter as "not given" (`"temperature": null`, which the openai client
    sends for `temperature=None`): such a field is left unset, so the model's own default applies, not refused."""
    if isinstance(data, dict) and None in data.values():
        defaulted = _defaulted_fields(model)
        data = {k: v for k, v in data.items() if v is not None or k not in defaulted}
    return data


StopString = Annotated[Text, Field(max_length=MAX_STOP_CHARS)]
MAX_METADATA_KEYS, MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS = 16, 64, 512


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: str
    text: Text | None = None
    refusal: Text | None = Field(default=None, description="a `refusal` part of an assistant's earlier turn")


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Text
    arguments: Text | JsonObject = Field(description="JSON text (OpenAI's) or an object")
    # The openai package's parse() adds this beside `arguments` (the same call, parsed); a history that appends a
    # parsed message sends it back. `arguments` is what the model reads.
    parsed_arguments: JsonObject | None = None


class ToolCall(BaseModel):
    """An assistant's earlier call, sent back in the history."""

    model_config = ConfigDict(extra="forbid", strict=True)
    id: Text | None = None
    type: Literal["function"] = "function"
    function: FunctionCall
    # The openai package's stream helper (`chat.completions.stream(...).get_final_completion()`) keeps each call's
    # stream `index`; an agent loop sends that message back as it is. Its place in the list says the same.
    index: int | None = Field(default=None, ge=0, lt=2**31)


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: Text


class ToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"]
    function: NamedFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | Items[ContentPart] | None = None
    name: Text | None = None
    tool_calls: Items[ToolCall] | None = Field(default=None, description="an assistant's earlier calls")
    tool_call_id: Text | None = Field(default=None, description="a tool message: the call it answers")
    refusal: Text | None = None
    # What an answer's message carries besides, as `message.model_dump()` and parse() send it back: null (or no
    # annotations) is no content, and `parsed` is `content` parsed again. Anything else in them is a 400.
    audio: None = None
    function_call: None = None
    annotations: Annotated[list, Field(max_length=0)] | None = None
    parsed: JsonObject | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _parts_are_text(cls, value):
        """Text parts (and an assistant's refusal parts) only, said so: an image part's 400 was pydantic's words for
        both shapes content may take ("Input should be a valid string; …image_url: Extra inputs are not permitted")."""
        if not isinstance(value, list):
            return value
        for j, part in enumerate(value):
            if not isinstance(part, dict):
                raise ValueError(f"content[{j}]: a part is an object with a `type` (`text`, with its `text`)")
            kind = part.get("type")
            if kind not in ("text", "refusal"):
                raise ValueError(
                    f"content[{j}]: parts of type {str(kind)[:32]!r} are not supported: Tandem serves text (`text` "
                    "parts, and `refusal` parts in an assistant's turn)"
                )
            if not isinstance(part.get(kind), str):
                raise ValueError(f"content[{j}]: a {kind} part needs `{kind}`, a string")
        return value

    @model_validator(mode="after")
    def _says_something(self):
        """A user's, system's or developer's turn without content (null, or no parts) is a 400, as OpenAI's: it
        reached the template as an empty turn. An assistant's may be null (an answer with no text sent back, from
        any backend), and a tool's may have no parts (LangChain sends a tool that returned an empty list so)."""
        if self.role != "assistant" and (self.content is None or (self.content == [] and self.role != "tool")):
            raise ValueError(f"a {self.role}'s message needs content: it is {self.content!r}")
        return self

    @model_validator(mode="after")
    def _answers_fields_on_an_answer(self):
        """What an answer's message carries (`parsed`, `annotations`, a refusal) belongs to an assistant's turn."""
        if self.role != "assistant":
            for name in ("parsed", "annotations", "refusal", "audio", "function_call"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only an assistant's message carries it, not a {self.role}'s")
        return self

    def for_template(self) -> dict:
        """The message as a chat template reads it: text content, and the tool fields that are set."""
        text = self.text()
        if self.refusal:  # an assistant's earlier refusal is what it said: the model reads it as its turn's text
            text = f"{text}\n{self.refusal}" if text else self.refusal
        out = {"role": self.role, "content": text}
        for key in ("name", "tool_call_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.tool_calls is not None:
            out["tool_calls"] = [
                call.model_dump(exclude_none=True, exclude={"function": {"parsed_arguments"}})
                for call in self.tool_calls
            ]
        return out

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if part.type == "text" and part.text is not None and part.refusal is None:
                texts.append(part.text)
            elif part.type == "refusal" and self.role == "assistant" and part.refusal is not None and part.text is None:
                texts.append(part.refusal)  # what the assistant said, as a refusal field is read
            else:
                raise ValueError(
                    f"content part of type {part.type!r} is not supported (text, and refusal in an assistant's turn)"
                )
        return "".join(texts)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False
    include_obfuscation: Literal[False] | None = Field(default=None, description="chunks are never padded")

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data):
        return null_is_not_given(cls, data)


class _GenerationParams(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(
        default=1.0,
        ge=0,
        le=2,
        allow_inf_nan=False,
        description=f"0 (greedy) to 2 (under {MIN_TEMPERATURE}: served as {MIN_TEMPERATURE})",
    )
    top_p: float = Field(
        default=1.0, ge=0, le=1, allow_inf_nan=False, description="0 keeps only the most likely token: greedy"
    )
    top_k: int = Field(default=0, ge=0, lt=2**31, description="Tandem extension; 0 means off")
    min_p: float = Field(
        default=0.0, ge=0, le=1, allow_inf_nan=False, description="drop tokens below min_p times the top probability"
    )
    seed: int | None = Field(
        default=None, ge=-(2**63), lt=2**63, description="OpenAI's int64; a negative one is read modulo 2^63"
    )
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_SEQUENCES)] | None = Field(
        default=None, description=f"up to {MAX_STOP_SEQUENCES} sequences of at most {MAX_STOP_CHARS} characters"
    )
    n: int = Field(default=1, ge=1, le=MAX_N, description="choices, up to the gateway's TANDEM_MAX_N (default 8)")
    stream: bool = False
    stream_options: StreamOptions | None = None
    metadata: JsonObject | None = None
    priority: int = Field(
        default=0,
        ge=-(2**31),
        lt=2**31,
        description="Tandem extension; higher runs first, up to the tenant's allowance (above it: clamped)",
    )
    user: Text | None = None
    presence_penalty: float = Field(default=0.0, ge=-2, le=2, allow_inf_nan=False)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2, allow_inf_nan=False)
    repetition_penalty: float = Field(
        default=1.0,
        ge=MIN_REPETITION_PENALTY,
        le=10,
        allow_inf_nan=False,
        description=f"vLLM extension (HF's), {MIN_REPETITION_PENALTY} to 10; 1 is off",
    )
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100, allow_inf_nan=False)]] | None = Field(
        default=None, max_length=MAX_LOGIT_BIAS, description="token id (as a string) -> bias added to its logit"
    )
    ignore_eos: bool = Field(default=False, description="vLLM extension: go on past the end-of-sequence token")
    stop_token_ids: Items[Annotated[int, Field(ge=0, lt=2**31)]] | None = Field(
        default=None, max_length=MAX_STOP_TOKEN_IDS, description="vLLM extension: token ids that end the answer"
    )
    # Accepted because they cannot change the answer, and only with the values that cannot.
    store: Literal[False] | None = Field(default=None, description="completions are never stored")
    service_tier: Literal["auto", "default"] | None = None
    prompt_cache_key: Text | None = Field(default=None, description="prefixes are cached and routed automatically")
    # OpenAI's `in_memory` (its OpenAPI document spelt it `in-memory` for a while: both are taken)
    prompt_cache_retention: Literal["in_memory", "in-memory"] | None = Field(
        default=None, description="prefixes stay cached while the workers' KV memory holds them; never 24h"
    )
    safety_identifier: Text | None = None
    modalities: Items[Literal["text"]] | None = None
    response_format: JsonObject | None = Field(
        default=None,
        description='{"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {"schema": ...}}:'
        " the answer follows it (grammar-constrained decoding)",
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data):
        return null_is_not_given(cls, data)

    def grammar(self) -> str:
        """The llguidance grammar the answer must follow; "" for none. GrammarError when it cannot be made."""
        return (grammar_for(self.response_format) or "") if self.response_format is not None else ""

    @field_validator("stream_options")
    @classmethod
    def _stream_options_need_stream(cls, value, info: ValidationInfo):
        if value is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed with stream: true")
        return value

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_sizes(cls, value):
        """The limits in words ("at most 256 items", and a second error for the shape not sent, were pydantic's)."""
        listed = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        if len(listed) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences, as OpenAI's; got {len(listed)}")
        for sequence in listed:
            if isinstance(sequence, str) and len(sequence) > MAX_STOP_CHARS:
                raise ValueError(f"a stop sequence is at most {MAX_STOP_CHARS} characters; one has {len(sequence)}")
            if sequence == "":  # it would stop at once, or (as it was) be dropped unsaid
                raise ValueError("a stop sequence is at least one character; one is empty")
        return value

    @field_validator("metadata")
    @classmethod
    def _openai_metadata_limits(cls, value: dict | None) -> dict | None:
        """OpenAI's limits: 16 keys of at most 64 characters. (Each key is checked for a misspelt `privacy`; 170,000
        of them held the event loop for seconds.)"""
        if value is not None and len(value) > MAX_METADATA_KEYS:
            raise ValueError(f"at most {MAX_METADATA_KEYS} keys, as OpenAI's metadata; got {len(value)}")
        for key in value or {}:
            if len(key) > MAX_METADATA_KEY_CHARS:
                raise ValueError(f"keys of at most {MAX_METADATA_KEY_CHARS} characters, as OpenAI's; got {key[:20]!r}…")
        return value  # its values: `metadata_value_refused`, after the keys meant for privacy tags are named

    def metadata_value_refused(self) -> tuple[str, str] | None:
        """(the key, why) for a metadata value OpenAI refuses (values are strings of at most 512 characters; a
        request that passes here passes there); Tandem's `privacy` may be a list of tags. Checked after the keys
        meant for privacy tags (`{"local_only": true}` is named as one, not as a value that is no string)."""
        for key, item in (self.metadata or {}).items():
            if key != "privacy" and (not isinstance(item, str) or len(item) > MAX_METADATA_VALUE_CHARS):
                got = f"a {type(item).__name__}" if not isinstance(item, str) else f"{len(item)} characters"
                return (
                    key,
                    f"values are strings of at most {MAX_METADATA_VALUE_CHARS} characters, as OpenAI's; got {got}",
                )
        return None

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not (key.isascii() and key.isdigit() and int(key) < 2**31):
                raise ValueError(f"keys are token ids (0 to 2^31-1, as strings), got {key[:20]!r}")
        return value

    def sampling(self, defaults: GenerationDefaults) -> dict[str, float]:
        """temperature, top_p, top_k, min_p and repetition_penalty: the request's where it set them, else the
        model's generation_config.json defaults (serving/checkpoint.py)."""
        resolved = defaults.resolve({name: getattr(self, name) for name in SAMPLING_FIELDS}, self.model_fields_set)
        if resolved["top_p"] < MIN_TOP_P:  # the smallest nucleus is the most likely token alone: greedy (0 is "off"
            # below, and 1e-46 is 0 in the engines' float32)
            resolved |= {"temperature": 0.0, "top_p": 1.0}
        return resolved

    def token_biases(self) -> dict[int, float]:
        return {int(token): bias for token, bias in (self.logit_bias or {}).items()}

    def wanted_top_logprobs(self) -> int | None:
        """None: no log-probabilities; otherwise each token's, with this many alternatives."""
        raise NotImplementedError

    def wanted_prompt_logprobs(self) -> int | None:
        """None: the prompt is not scored; otherwise its tokens' log-probabilities too (completions' echo)."""
        return None

    def echoes(self) -> bool:
        """The answer begins with the prompt (completions' echo)."""
        return False

    @field_validator("seed")
    @classmethod
    def _seed_as_the_workers_take_it(cls, value: int | None) -> int | None:
        return None if value is None else value % 2**63

    @field_validator("temperature")
    @classmethod
    def _temperature_floor(cls, value: float) -> float:
        """OpenAI takes any value in [0, 2]; between 0 and MIN_TEMPERATURE it is served as MIN_TEMPERATURE, as vLLM
        does (below it, logits divided by the temperature overflow). Evaluation harnesses send 1e-3 or 1e-5 to mean
        "all but greedy", and were refused."""
        return MIN_TEMPERATURE if 0 < value < MIN_TEMPERATURE else value

    def include_usage(self) -> bool:
        """A stream that ends with a usage chunk (stream_options.include_usage; stream_options needs stream)."""
        return bool(self.stream_options and self.stream_options.include_usage)

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def unsupported_fields(self) -> list[str]:
        """OpenAI's fields Tandem does not serve, set to a value that asks for something."""
        extra = self.model_extra or {}
        return [name for name in UNSUPPORTED if name in extra and extra[name] not in (None, *UNSUPPORTED[name])]

    def unknown_fields(self) -> list[str]:
        return [name for name in self.model_extra or {} if name not in UNSUPPORTED]

    def refused_field(self) -> tuple[str, str] | None:
        """(the field, why) for the first field this request sets that Tandem cannot honour; None if none."""
        if unsupported := self.unsupported_fields():
            return unsupported[0], f"not supported by Tandem: {', '.join(unsupported)}"
        if unknown := self.unknown_fields():
            return unknown[0], f"unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}"
        return None


def _all_answered(calls: set[str] | None, answered: set[str], before: str) -> None:
    """Every call of the assistant's message before `before` has its tool message."""
    if missing := (calls or set()) - answered:
        raise ValueError(
            f"an assistant's message with tool_calls must be followed by a tool message for each call, before "
            f"{before}; none answers {', '.join(sorted(missing))[:200]}"
        )


class ChatCompletionRequest(_GenerationParams):
    messages: Items[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: Items[JsonObject] | None = Field(
        default=None, min_length=1, max_length=MAX_TOOLS, description="functions the model may call (at least one)"
    )
    parallel_tool_calls: bool | None = Field(default=None, description="with tools: may the answer make several calls")
    tool_choice: Literal["none", "auto", "required"] | ToolChoice | None = Field(
        default=None, description='"none", "auto" (default with tools), "required", or {"type": "function", ...}'
    )
    logprobs: bool | None = Field(default=None, description="each answer token's log-probability")
    top_logprobs: int | None = Field(
        default=None, ge=0, le=MAX_TOP_LOGPROBS, description="with logprobs: this many alternatives per token"
    )

    @field_validator("messages")
    @classmethod
    def _tool_messages_answer_calls(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        """OpenAI's rules for a history with calls: a tool message names the call it answers (`tool_call_id`), one
        of the assistant's message before it; an assistant's calls are each answered before the next turn. A broken
        history reached the prompt as it was, and code written against Tandem then failed on OpenAI."""
        calls: set[str] | None = None  # the ids of the calls open (None: no assistant's calls before)
        answered: set[str] = set()
        for i, message in enumerate(messages):
            if message.role == "tool":
                if message.tool_call_id is None:
                    raise ValueError(f"messages[{i}]: a tool message needs tool_call_id, the id of the call it answers")
                if calls is None:
                    raise ValueError(
                        f"messages[{i}]: a tool message must answer a call of an assistant's message (one with "
                        "tool_calls) before it"
                    )
                if calls and message.tool_call_id not in calls:
                    raise ValueError(
                        f"messages[{i}]: tool_call_id {message.tool_call_id[:64]!r} is none of the calls before it "
                        f"({', '.join(sorted(calls))[:200]})"
                    )
                answered.add(message.tool_call_id)
                continue
            _all_answered(calls, answered, f"messages[{i}]")
            calls = (
                {c.id for c in message.tool_calls if c.id}
                if message.role == "assistant" and message.tool_calls
                else None
            )
            answered = set()
        _all_answered(calls, answered, "the end")
        return messages

    @field_validator("max_completion_tokens")
    @classmethod
    def _one_limit(cls, value, info: ValidationInfo):  # as OpenAI: one of them, not both (one was dropped unsaid)
        if value is not None and info.data.get("max_tokens") is not None:
            raise ValueError("max_tokens and max_completion_tokens cannot both be set: send one")
        return value

    @field_validator("parallel_tool_calls")
    @classmethod
    def _parallel_needs_tools(cls, value, info: ValidationInfo):  # as OpenAI: code written here then runs there
        if value is not None and not info.data.get("tools"):
            raise ValueError("parallel_tool_calls is only allowed when tools are given")
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _top_needs_logprobs(cls, value, info: ValidationInfo):  # a field's validator: the 400 names top_logprobs
        if value is not None and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs: true")
        return value

    def wanted_top_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(_GenerationParams):
    prompt: Text | Items[int] | Items[Text] | Items[Items[int]] = Field(
        description="text or token ids, or a batch of them: each prompt is answered by `n` choices of its own"
    )
    max_tokens: int | None = Field(
        default=None, ge=0, description="0 with echo: the prompt alone (scored, with logprobs)"
    )
    logprobs: int | None = Field(
        default=None, ge=0, le=MAX_TOP_LOGPROBS, description="each token's log-probability and this many alternatives"
    )
    echo: bool = Field(default=False, description="the prompt before the answer (with logprobs: the prompt's too)")

    def wanted_prompt_logprobs(self) -> int | None:
        return self.logprobs if self.echo else None

    def echoes(self) -> bool:
        return self.echo

    def wanted_top_logprobs(self) -> int | None:
        return self.logprobs

    def prompts(self) -> list[str | list[int]]:
        """The prompts the request carries, in order: one, or each of a batch."""
        if isinstance(self.prompt, list) and self.prompt and not isinstance(self.prompt[0], int):
            return list(self.prompt)
        return [self.prompt]

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_form(cls, value):
        """A batch mixing texts and token-id lists is named as such (pydantic's union lists each form it missed)."""
        if isinstance(value, list) and value and not isinstance(value[0], int):
            kinds = {"text" if isinstance(one, str) else "token ids" if isinstance(one, list) else "" for one in value}
            if kinds == {"text", "token ids"}:
                raise ValueError("a batch of prompts is all texts or all token-id lists, not both")
        return value

    @field_validator("prompt")
    @classmethod
    def _prompts_not_empty(cls, value):
        """A batch of one (`["…"]`, `[[ids]]`: what lm-eval sends) is that prompt."""
        if isinstance(value, list) and value and not isinstance(value[0], int):
            if len(value) == 1:
                value = value[0]
            elif empty := [i for i, one in enumerate(value) if len(one) == 0]:
                raise ValueError(f"prompt[{empty[0]}] is empty: each prompt of a batch needs text or token ids")
        if len(value) == 0:
            raise ValueError("prompt must not be empty")
        return value


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict]:
    """OpenAPI `responses` entries for the errors a route can return."""
    descriptions = {
        400: "bad input, or prompt + max_tokens over the model's context (code context_length_exceeded)",
        401: "missing or invalid API key",
        404: "unknown model",
        413: "the request body is over the gateway's limit",
        429: "the tenant is over a rate or concurrency limit (see Retry-After)",
        502: "the backend failed mid-answer",
        503: "no allowed backend could serve the request",
    }
    return {s: {"model": ErrorResponse, "description": descriptions[s]} for s in statuses}

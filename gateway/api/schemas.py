"""OpenAI request bodies as pydantic models, with Tandem's extensions (top_k, priority).

Fields OpenAI defines that do not change the answer (user, logit_bias with
no entries, ...) are accepted and ignored; fields that would change it and
that we do not support are rejected by name, never silently dropped.
"""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from tandem.engine_api import MIN_TEMPERATURE

UNSUPPORTED = ("tools", "functions", "tool_choice", "logprobs", "top_logprobs", "response_format", "audio")
MAX_STOP_CHARS = 256
MAX_MESSAGES = 2048


def _valid_unicode(value: str) -> str:
    """JSON can carry a lone surrogate (\\ud800); no tokenizer and no wire format can."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"not valid Unicode: a lone surrogate {value[exc.start]!r} at {exc.start}") from None
    return value


Text = Annotated[str, AfterValidator(_valid_unicode)]
StopString = Annotated[Text, Field(max_length=MAX_STOP_CHARS)]


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: Text | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise ValueError(f"content part of type {part.type!r} is not supported (text only)")
        return "".join(part.text for part in self.content)


class StreamOptions(BaseModel):
    include_usage: bool = False


class _GenerationParams(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(
        default=1.0, ge=0, le=2, allow_inf_nan=False, description=f"0 (greedy), or {MIN_TEMPERATURE} to 2"
    )
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=0, ge=0, lt=2**31, description="Tandem extension; 0 means off")
    min_p: float = Field(
        default=0.0, ge=0, le=1, allow_inf_nan=False, description="drop tokens below min_p times the top probability"
    )
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    stop: StopString | Annotated[list[StopString], Field(max_length=4)] | None = Field(
        default=None, description=f"up to 4 sequences of at most {MAX_STOP_CHARS} characters"
    )
    n: int = Field(default=1, ge=1, le=1, description="only 1 is supported")
    stream: bool = False
    stream_options: StreamOptions | None = None
    metadata: dict[str, Any] | None = None
    priority: int = Field(
        default=0,
        ge=-(2**31),
        lt=2**31,
        description="Tandem extension; higher runs first, up to the tenant's allowance (above it: clamped)",
    )
    user: Text | None = None

    @field_validator("temperature")
    @classmethod
    def _temperature_floor(cls, value: float) -> float:
        if 0 < value < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}")
        return value

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def unsupported_fields(self) -> list[str]:
        extra = self.model_extra or {}
        return [name for name in UNSUPPORTED if extra.get(name) not in (None, False, [], {})]


class ChatCompletionRequest(_GenerationParams):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class CompletionRequest(_GenerationParams):
    prompt: Text | list[int] = Field(description="text, or token ids")
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _not_empty(cls, value):
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
        400: "bad input",
        401: "missing or invalid API key",
        404: "unknown model",
        413: "prompt + max_tokens exceed the model's context",
        429: "the tenant is over a rate or concurrency limit (see Retry-After)",
        502: "the backend failed mid-answer",
        503: "no allowed backend could serve the request",
    }
    return {s: {"model": ErrorResponse, "description": descriptions[s]} for s in statuses}

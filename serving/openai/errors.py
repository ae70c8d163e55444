"""Typed errors the gateway raises, each carrying its HTTP status and OpenAI error type.

They are turned into `{"error": {"message", "type", "code"}}` responses in one
place, `gateway.main`.
"""


class GatewayError(Exception):
    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(
        self, message: str, code: str | None = None, headers: dict[str, str] | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.code
        self.headers = headers or {}
        self.param = param  # the request field at fault, as OpenAI names it

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.code}}


class BadRequest(GatewayError):
    status_code, error_type, code = 400, "invalid_request_error", "invalid_request"


_PYDANTIC_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none", "bytes", "constrained-str",
                                 "constrained-int", "constrained-float", "tagged-union"})  # fmt: skip


def union_member(part: object) -> bool:
    """A `loc` part pydantic adds for the union member it tried (`function-after[...]`, `list[str]`, `str`, a
    model such as `_NamedFunction`): no field's name, and its text can hold a validator's repr with a memory
    address."""
    return isinstance(part, str) and (
        "[" in part or "(" in part or part in _PYDANTIC_TYPE_TAGS or part[:1] == "_"  # a private model's name
    )


def field_path(loc) -> str:
    """A field's place as OpenAI's errors name it: `messages[0].tool_calls[1].function` (pydantic's loc reads
    `messages.0.tool_calls.1.function`). An object's keys stay keys: `logit_bias.5`, `metadata.k`."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def refusal(errors) -> BadRequest:
    """The 400 for a body's problems (pydantic's errors; a leading `body` in a loc is left out): the first
    MAX_PROBLEMS_LISTED, and how many more."""
    # problem -> its field, in order. A dict: a list's `in` was quadratic, and a body with 30,000 bad keys held the
    # event loop for seconds for its 400 (and a megabyte message).
    problems: dict[str, str] = {}
    for error in errors:
        if error["type"] == "json_invalid":
            return BadRequest(f"request body is not valid JSON: {error.get('ctx', {}).get('error', error['msg'])}")
        where = field_path(p for p in error["loc"] if p != "body" and not union_member(p)) or "body"
        said = error["msg"].removeprefix("Value error, ")  # pydantic's label for our own validators' words
        problems.setdefault(f"{where}: {said}", where)
    listed = list(problems)[:MAX_PROBLEMS_LISTED]
    more = len(problems) - len(listed)
    message = "; ".join(listed) + (f"; and {more} more" if more else "")
    return BadRequest(message, param=next(iter(problems.values()), None))


# FastAPI's and Starlette's body parsing says only that it failed: what can make valid-looking JSON fail
UNDECODABLE_BODY = (
    "the request body could not be decoded as JSON: send it in UTF-8 (or UTF-16/32), not another encoding, "
    "nested at most a few hundred levels deep, with integers of at most 4300 digits"
)
_HTTP_CODES = {400: "invalid_request", 404: "unknown_url", 405: "method_not_allowed"}


def framework_refusal(status: int, detail: str) -> tuple[str, str | None]:
    """FastAPI's or Starlette's own refusal (an unparsable body, an unknown route or method) as (message, code) in
    OpenAI's words: every refusal names its kind in `code`."""
    if detail == "There was an error parsing the body":  # what json.loads could not decode
        return UNDECODABLE_BODY, "invalid_request"
    return detail, _HTTP_CODES.get(status)


MAX_PROBLEMS_LISTED = 20  # a 400 names the first problems; a body with thousands says how many more


class Unauthorized(GatewayError):
    status_code, error_type, code = 401, "authentication_error", "invalid_api_key"


class ModelNotFound(GatewayError):
    status_code, error_type, code = 404, "invalid_request_error", "model_not_found"


class PromptTooLong(GatewayError):
    status_code, error_type, code = 400, "invalid_request_error", "context_length_exceeded"  # as OpenAI answers

    @classmethod
    def of(cls, context: int, num_prompt: int, max_tokens: int | None, prompt_field: str) -> "PromptTooLong":
        """OpenAI's words; `param` is the prompt's field, as OpenAI names it even when max_tokens alone is too large.
        `max_tokens` None: the request asked for none, and the prompt alone leaves no room for one."""
        if max_tokens is None:
            return cls(
                f"This model's maximum context length is {context} tokens. However, your {prompt_field} resulted in "
                f"{num_prompt} tokens. Please reduce the length of the {prompt_field}.",
                param=prompt_field,
            )
        return cls(
            f"This model's maximum context length is {context} tokens. However, you requested "
            f"{num_prompt + max_tokens} tokens ({num_prompt} in the {prompt_field}, {max_tokens} in the completion). "
            f"Please reduce the length of the {prompt_field} or completion.",
            param=prompt_field,
        )


class RateLimited(GatewayError):
    status_code, code = 429, "rate_limit_exceeded"

    def __init__(
        self, message: str, retry_after_s: int, limit: str = "requests", headers: dict[str, str] | None = None
    ) -> None:
        """`headers`: OpenAI's x-ratelimit-* headers for the tenant's limits, beside Retry-After."""
        super().__init__(
            f"{message}; retry after {retry_after_s} s", headers={"Retry-After": str(retry_after_s)} | (headers or {})
        )
        self.error_type = limit  # OpenAI's type names the limit: "requests" or "tokens"


class NoBackend(GatewayError):
    status_code, error_type, code = 503, "service_unavailable", "no_backend"


class BackendFailed(GatewayError):
    status_code, error_type, code = 502, "server_error", "backend_failed"

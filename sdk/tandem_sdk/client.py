"""`Client` and `AsyncClient`: OpenAI-shaped chat completions with Tandem's routing rules.

For every call, before any byte leaves:
1. private? (a tag of the never-leave set, or a PII detector firing on any
   text the request carries) -> the local agent on loopback, with the
   device's token, or PrivateRequestError. Never the gateway, whatever fails.
2. otherwise -> the gateway, with X-Tandem-Device, the app's tags in
   X-Tandem-Privacy (so the gateway applies its own policy too) and the API
   key; 429 and 503 are retried, honouring Retry-After. If the gateway cannot
   be reached and the app allowed it, a local agent serves the request instead.

Calls to the local agent, and calls that carry privacy tags, ignore proxy
environment variables (HTTP_PROXY and the like): they go straight to their
host. Planning is shared; the two classes only differ in doing I/O.
"""

import asyncio
import codecs
import json
import math
import os
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import certifi
import httpx

from tandem_sdk.detectors import DETECTORS
from tandem_sdk.device import DeviceCapability, detect_device
from tandem_sdk.errors import (
    APIError,
    GatewayUnavailable,
    PrivateAPIError,
    PrivateRequestError,
    StreamInterrupted,
    TandemError,
)
from tandem_sdk.local_token import CHALLENGE_HEADER, new_challenge, proves, read_token, token_file
from tandem_sdk.privacy import DEFAULT_DETECTORS, NEVER_LEAVE_DEVICE, check_loopback, private_reason
from tandem_sdk.sse import Lines, StreamEndedEarly, aevents, events
from tandem_sdk.tags import TagError, check_spelling, misplaced_privacy_key, privacy_tags

DEFAULT_LOCAL_AGENT = "http://127.0.0.1:50062"
LOCAL_PROBE_TIMEOUT_S = 0.5  # each read of the local agent's health probe; its whole answer within twice this
PROBE_MAX_BYTES = 4096  # of the probe's answer: an agent's health is a few hundred bytes
RETRY_STATUSES = {429, 503}
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 60.0
SHOWN_BYTES = 200  # of an answer that is not what was asked for, in the error that says so
JSON_BODY = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Target:
    url: str  # the chat completions endpoint
    headers: dict[str, str | bytes]  # a privacy tag may be any script: its header is UTF-8
    served_by: str  # "gateway" or "local-agent"
    direct: bool = False  # past any proxy the environment names: loopback, or a request with privacy tags


@dataclass
class _Settings:
    gateway_url: str | None
    api_key: str | None
    local_agent_url: str | None
    device: DeviceCapability
    timeout_s: float
    max_retries: int
    allow_local_fallback: bool
    detectors: tuple[str, ...]
    never_leave: frozenset[str]
    known_tags: frozenset[str]
    local_token_file: Path


def _gateway_target(s: _Settings, tags: frozenset[str]) -> Target:
    headers = {"X-Tandem-Device": s.device.header()}
    if tags:
        headers["X-Tandem-Privacy"] = ",".join(sorted(tags)).encode()
    if s.api_key:
        headers["Authorization"] = f"Bearer {s.api_key}"
    return Target(f"{s.gateway_url}/v1/chat/completions", headers, "gateway", direct=bool(tags))


def _local_headers(s: _Settings) -> dict[str, str | bytes]:
    token = read_token(s.local_token_file)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _local_target(s: _Settings, tags: frozenset[str]) -> Target:
    headers = _local_headers(s) | ({"X-Tandem-Privacy": ",".join(sorted(tags)).encode()} if tags else {})
    return Target(f"{s.local_agent_url}/v1/chat/completions", headers, "local-agent", direct=True)


def _openai_extras(params: dict) -> tuple[dict, list]:
    """The openai client's `extra_body` (merged into the body, as it does) and `extra_headers` (only
    X-Tandem-Privacy: its tags count), read before the privacy decision: an app moved from the openai client that
    tags a request there keeps it on the device. Any other extra header is refused, not sent as a body field."""
    params = dict(params)
    extra_body, extra_headers = params.pop("extra_body", None) or {}, params.pop("extra_headers", None) or {}
    if not isinstance(extra_body, dict) or not isinstance(extra_headers, dict):
        raise TypeError("extra_body and extra_headers must be dicts")
    twice = sorted(set(extra_body) & (set(params) | {"model", "messages", "stream", "privacy"}))
    if twice:
        raise TypeError(
            f"extra_body {twice}: given as arguments too (or the SDK's own, as privacy=); pass each once. "
            "Nothing was sent"
        )
    others = sorted(name for name in extra_headers if str(name).lower() != "x-tandem-privacy")
    if others:
        raise TypeError(
            f"extra_headers {others}: the SDK sends its own headers; only X-Tandem-Privacy may be added. "
            "Nothing was sent"
        )
    return params | extra_body, list(extra_headers.values())


def _call_options(params: dict):
    """The openai client's per-call options that are no body field: `timeout` (seconds, or an httpx.Timeout) is this
    call's; `extra_query` is refused, as Tandem's chat completions read no query. Both were sent in the body, where
    the local agent and the gateway refuse an unknown field (a review). Popped from `params`."""
    timeout = params.pop("timeout", None)
    if params.pop("extra_query", None):
        raise TypeError("extra_query: Tandem's chat completions take no query parameters; nothing was sent")
    if timeout is None:
        return httpx.USE_CLIENT_DEFAULT
    if isinstance(timeout, httpx.Timeout):
        return timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
        raise TypeError("timeout must be seconds (a positive number) or an httpx.Timeout; nothing was sent")
    return float(timeout)


def _body(model: str, messages: list[dict], stream: bool, params: dict) -> dict:
    body = {"model": model, "messages": messages, "stream": stream} | {k: v for k, v in params.items() if v is not None}
    if stream:
        body.setdefault("stream_options", {"include_usage": True})
    return body


def _encoded(body: dict) -> bytes:
    """The request's JSON, as httpx's `json=` writes it (NaN refused: no JSON parser takes it)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _keys_once(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object whose keys are each written once. `{1: card, "1": "x"}` is written with "1" twice: read back,
    the last one stands, and the card was sent unscanned (a review). Refused: the server would read it so too."""
    out = dict(pairs)
    if len(out) != len(pairs):
        twice = next(k for i, (k, _) in enumerate(pairs) if any(k == other for other, _ in pairs[:i]))
        raise TypeError(f"an object of the request would hold the key {twice!r} twice in JSON (a number and a "
                        "string of it, say); nothing was sent")  # fmt: skip
    return out


def _retry_delay_s(response: httpx.Response, attempt: int) -> float:
    value = response.headers.get("retry-after")
    try:  # at most MAX_RETRY_AFTER_S, whatever the server says (`inf` included)
        return (
            min(MAX_RETRY_AFTER_S, max(0.0, float(value)))
            if value is not None
            else min(MAX_BACKOFF_S, 0.5 * 2**attempt)
        )
    except ValueError:
        return min(MAX_BACKOFF_S, 0.5 * 2**attempt)  # an HTTP-date: fall back to backoff


def _unreached(exc: httpx.TransportError) -> bool:
    """The request never reached the gateway (refused, DNS, TLS, a connect timeout): the local fallback may serve
    it. After that (a read timeout, a dropped connection) the gateway may be answering it, so it is not re-run."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.UnsupportedProtocol | httpx.ProxyError)


def _gateway_unavailable(s: _Settings, exc: httpx.TransportError) -> GatewayUnavailable:
    if _unreached(exc):
        return GatewayUnavailable(f"gateway {s.gateway_url} unreachable: {exc}")
    return GatewayUnavailable(
        f"gateway {s.gateway_url} failed after it had the request ({type(exc).__name__}: {exc}); not re-run locally"
    )


def _fallback_failed(s: _Settings, exc: httpx.TransportError, local: httpx.HTTPError) -> GatewayUnavailable:
    """The gateway unreached and the local fallback failed too: one error an app catching TandemError sees (it was
    httpx's own, past the app's handlers: a review)."""
    return GatewayUnavailable(
        f"gateway {s.gateway_url} unreachable ({exc}); the local fallback at {s.local_agent_url} failed too "
        f"({type(local).__name__}: {local})"
    )


def _api_key(value: object) -> str | None:
    """The key as it goes in a header: visible ASCII, no spaces. A key pasted with a line break or a smart quote
    is refused when the client is made, not by httpx mid-call with an encoding error."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"api_key must be a string, not {type(value).__name__}")
    key = value.strip()
    bad = next((ch for ch in key if not ("!" <= ch <= "~")), None)
    if bad is not None:
        raise ValueError(
            f"api_key holds {bad!r} (U+{ord(bad):04X}) at position {key.index(bad)}: a key is visible ASCII with "
            "no spaces; was it pasted with a quote or a line break?"
        )
    return key


def _timeout_s(value: object) -> float:
    """The client's timeout: seconds, a positive number. `"5"`, `nan` and `inf` failed on the first call with httpx's
    own words, and None took every limit away (a review)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"timeout_s must be seconds, a positive number, not {value!r}")
    return float(value)


def _gateway_url(value: object) -> str | None:
    """An http(s) URL with a host: `127.0.0.1:8000` (no scheme) read as unreachable on the first call (a review)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise TypeError(f"gateway_url must be a string, not {type(value).__name__}")
    try:
        url = httpx.URL(value.strip())
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ValueError(f"gateway_url {value!r} is not a URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(f"gateway_url {value!r} must be an http:// or https:// URL with a host, e.g. http://gw:8000")
    return str(url).rstrip("/")


def _flag(name: str, value: object) -> bool:
    """A true or false, not a word: `allow_local_fallback="no"` turned the fallback on (a review)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return value


def _read_limit(timeout, settings: "_Settings") -> float | None:
    """How long a call may wait for the rest of an answer, or between a stream's events: its own `timeout=`, else the
    client's timeout_s (an httpx.Timeout's read limit; None: none)."""
    if isinstance(timeout, httpx.Timeout):
        return timeout.read
    return timeout if isinstance(timeout, float) else settings.timeout_s


def _answer_late(request: httpx.Request, seconds: float, what: str) -> httpx.ReadTimeout:
    return httpx.ReadTimeout(f"{what} within {seconds:g} s", request=request)


def _probe_bounds(reply: httpx.Response, body: bytes, started: float) -> None:
    """The health probe's answer read so far, held to PROBE_MAX_BYTES and to twice the probe's timeout from when its
    headers came: it is asked before every private call, and a reply trickled or endless (what answers on the
    agent's port may be another program) held a private call for minutes, or read hundreds of MB (a review)."""
    if len(body) > PROBE_MAX_BYTES or time.monotonic() - started > 2 * LOCAL_PROBE_TIMEOUT_S:
        raise _answer_late(
            reply.request, 2 * LOCAL_PROBE_TIMEOUT_S, f"no health answer of at most {PROBE_MAX_BYTES} bytes"
        )


def _whole(response: httpx.Response, body: bytes) -> httpx.Response:
    """`response` with its `body` read (decoded: its content coding is dropped from the headers)."""
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_HEADERS]
    return httpx.Response(response.status_code, headers=headers, content=body, request=response.request)


_BODY_HEADERS = {"content-encoding", "content-length", "transfer-encoding"}


def _read_within(response: httpx.Response, seconds: float | None) -> bytes:
    """The body, read whole within `seconds` of its start: httpx's timeout bounds each read, so a server that sent
    its answer a byte a second held a call with a 3 s timeout for minutes (a review)."""
    deadline = time.monotonic() + seconds if seconds is not None else math.inf
    chunks = []
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise _answer_late(response.request, seconds, "the answer did not arrive whole")
    return b"".join(chunks)


async def _aread_within(response: httpx.Response, seconds: float | None) -> bytes:
    deadline = time.monotonic() + seconds if seconds is not None else math.inf
    chunks = []
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise _answer_late(response.request, seconds, "the answer did not arrive whole")
    return b"".join(chunks)


class _EventLines:
    """An event stream's lines from its bytes (as the SSE format breaks them), and httpx.ReadTimeout once `seconds`
    pass without a `data:` line: a server that sent only keep-alive comments, or an event a byte at a time, held a
    stream for ever, each read within httpx's timeout (a review)."""

    def __init__(self, request: httpx.Request, seconds: float | None) -> None:
        self._request, self._seconds = request, seconds
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self._lines = Lines()
        self._last_data = time.monotonic()

    def feed(self, chunk: bytes) -> list[str]:
        lines = self._lines.feed(self._decode(chunk))
        now = time.monotonic()
        if any(line.startswith("data:") for line in lines):
            self._last_data = now
        elif self._seconds is not None and now - self._last_data > self._seconds:
            raise _answer_late(self._request, self._seconds, "no event came")
        return lines

    def end(self) -> list[str]:
        """The last line, where the stream ended without its line break."""
        return self._lines.feed(self._decode(b"", True)) + self._lines.end()


def _event_lines(response: httpx.Response, seconds: float | None) -> Iterator[str]:
    lines = _EventLines(response.request, seconds)
    for chunk in response.iter_bytes():
        yield from lines.feed(chunk)
    yield from lines.end()


async def _aevent_lines(response: httpx.Response, seconds: float | None) -> AsyncIterator[str]:
    lines = _EventLines(response.request, seconds)
    async for chunk in response.aiter_bytes():
        for line in lines.feed(chunk):
            yield line
    for line in lines.end():
        yield line


def _retries(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"max_retries must be a whole number >= 0, not {value!r}")
    return value


def _detectors(value: object) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    unknown = [n for n in names if n not in DETECTORS]
    if unknown:
        raise ValueError(f"unknown detector(s) {unknown}; known: {sorted(DETECTORS)}")
    return names


def _answer(response: httpx.Response, content: bytes, private: bool = False) -> dict:
    """A non-streamed answer: a JSON object that came with a 2xx, or an APIError saying what came instead (a
    proxy's HTML page, a redirect, nothing; a private request's as the local agent's error)."""
    try:
        answer = json.loads(content) if response.is_success else None  # a 307's JSON body is no completion
    except (ValueError, RecursionError):  # (nested past the parser's depth: it escaped as a RecursionError)
        answer = None
    if not isinstance(answer, dict):
        kind = response.headers.get("content-type", "no content type")
        if response.is_redirect:
            kind += f", a redirect to {response.headers.get('location', 'nowhere')}"
        said = f"the answer is not a JSON object ({kind}, {len(content)} bytes)"
        raise _api_error(response.status_code, said, None, private, said)
    return answer


def _is_event_stream(response: httpx.Response) -> bool:
    """The answer a stream asked for. httpx follows no redirect, so a 3xx lands here as what it is: not a stream."""
    media_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    return response.is_success and media_type == "text/event-stream"


def _verify(trust_env: bool) -> bool | ssl.SSLContext:
    """How the client checks a server's certificate: the system's, and SSL_CERT_FILE / SSL_CERT_DIR where set, as
    httpx reads them with trust_env. The client without proxies (trust_env False: tagged requests, the local agent)
    read neither, so a gateway whose certificate the app trusts through them failed only for tagged requests (a
    review; with allow_local_fallback they ran locally instead)."""
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if trust_env or not (cafile or capath):
        return True
    context = ssl.create_default_context(cafile=certifi.where())  # httpx's own store, then what the variables add
    context.load_verify_locations(cafile=cafile or None, capath=capath or None)
    return context


def _api_error(status: int, message: str, code: str | None, private: bool, said: str | None = None) -> APIError:
    """The error an answer carries; a private request's hides the agent's words from its text (PrivateAPIError;
    `said`: what it may say instead)."""
    return PrivateAPIError(status, message, code, said) if private else APIError(status, message, code)


def _not_a_stream(response: httpx.Response, head: bytes, private: bool = False) -> APIError:
    """A streamed request answered with no event stream: a captive portal's login page, a JSON body, a redirect.
    Read as a stream it would be an empty answer; the error says what came, so the proxy can be found."""
    kind = response.headers.get("content-type", "no content type")
    if response.is_redirect:
        kind += f", a redirect to {response.headers.get('location', 'nowhere')}"
    text = head[:SHOWN_BYTES].decode(errors="replace")
    said = f"the answer is not an event stream ({kind})"
    return _api_error(response.status_code, f"{said}: {text!r}", None, private, said)


def _head(response: httpx.Response, seconds: float | None) -> bytes:
    """Enough of a body to show what it is, what came within `seconds`; a long one is not read to its end (a
    captive portal's page trickled a byte at a time held a call with a 1 s timeout for a minute: a review)."""
    head, deadline = b"", time.monotonic() + (seconds if seconds is not None else math.inf)
    for part in response.iter_bytes():
        head += part
        if len(head) >= SHOWN_BYTES or time.monotonic() > deadline:
            break
    return head


async def _ahead(response: httpx.Response, seconds: float | None) -> bytes:
    """`_head` for the async client."""
    head, deadline = b"", time.monotonic() + (seconds if seconds is not None else math.inf)
    async for part in response.aiter_bytes():
        head += part
        if len(head) >= SHOWN_BYTES or time.monotonic() > deadline:
            break
    return head


def _raise_for(response: httpx.Response, private: bool = False) -> None:
    if response.status_code < 400:
        return
    try:
        error = response.json()
        error = error.get("error", error) if isinstance(error, dict) else error
        if not isinstance(error, dict):  # {"error": "model not found"}, a list, null: its text is the message
            error = {"message": response.text}
        message, code = error.get("message") or response.text, error.get("code")
    except (ValueError, RecursionError):
        message, code = response.text, None
    raise _api_error(response.status_code, message, code, private)


def _annotate(data: dict, target: Target, response: httpx.Response, private_reason_: str | None) -> dict:
    data["tandem"] = {
        "served_by": target.served_by,
        "route": response.headers.get("x-tandem-route"),
        "backend": response.headers.get("x-tandem-backend"),
        "private": private_reason_ is not None,
        "private_reason": private_reason_,
    }
    return data


# -- sync ----------------------------------------------------------------------------------------


def _chunk(payload: dict, response: httpx.Response, private: bool = False) -> dict:
    """A stream's event, or the APIError it carries: a server that fails mid-answer sends {"error": {...}} as an
    event (the gateway does, as OpenAI does), which is no chunk to hand the app."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if error is None and isinstance(payload, dict):
        return payload
    if not isinstance(error, dict):
        error = {"message": json.dumps(payload) if error is None else str(error)}
    message = f"mid-answer: {error.get('message') or error}"
    raise _api_error(response.status_code, message, error.get("code"), private)


def _interrupted(target: Target, reason: str | None, exc: Exception) -> Exception:
    """What a stream that broke after it began raises: the cause, where, and that nothing was re-run."""
    if isinstance(exc, json.JSONDecodeError):
        what = "not JSON"
    elif isinstance(exc, StreamEndedEarly):  # a clean close before [DONE]: a proxy's idle timeout, say
        what = str(exc)
    else:
        what = f"{type(exc).__name__}: {exc}"
    where = f"the {target.served_by.replace('-', ' ')} at {target.url.removesuffix('/v1/chat/completions')}"
    if reason is not None:  # a private request: it stays what it was, an error of the device's own agent
        return PrivateRequestError(
            f"private request ({reason}): {where} failed mid-answer ({what}); it was not sent anywhere else"
        )
    return StreamInterrupted(f"{where} failed mid-answer ({what}); the answer is incomplete and was not re-run")


class Stream:
    """Iterate for OpenAI chunk dicts; `close()` (or leaving a `with` block) cancels the request. A failure after
    the answer began, or an end without `data: [DONE]`, raises StreamInterrupted (PrivateRequestError for a private
    request), once the chunks that came are yielded; an error the server sent as an event raises APIError."""

    def __init__(
        self, response: httpx.Response, target: Target, context, reason: str | None = None, idle_s: float | None = None
    ) -> None:
        self.response, self.served_by, self._context = response, target.served_by, context
        self.route = response.headers.get("x-tandem-route")
        self._target, self._reason, self._idle_s = target, reason, idle_s
        self._closed = self._read = False

    def __iter__(self) -> Iterator[dict]:
        _read_once(self)
        try:
            for payload in events(_event_lines(self.response, self._idle_s), require_done=True):
                yield _chunk(payload, self.response, self._reason is not None)
        except (httpx.HTTPError, json.JSONDecodeError, StreamEndedEarly) as exc:
            if not self._closed:  # (closed by the app inside its loop: the end it asked for, not a failure)
                raise _interrupted(self._target, self._reason, exc) from exc
        finally:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._context.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _read_once(stream) -> None:
    """A stream is read once: a second loop over it, or one after `close()`, raised httpx's own StreamConsumed."""
    if stream._read or stream._closed:
        raise TandemError("this stream was read or closed already: a stream is read once")
    stream._read = True


def _open(http) -> None:
    """A call on a closed client: said in the SDK's words (it was httpx's RuntimeError)."""
    if http.is_closed:
        raise TandemError("this client is closed: make a new one")


class _ClientBase:
    """Settings shared by both clients: where the gateway and the local agent are, and who this device is."""

    def __init__(
        self,
        gateway_url: str | None = None,
        api_key: str | None = None,
        local_agent_url: str | None = DEFAULT_LOCAL_AGENT,
        device: dict | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        allow_local_fallback: bool = False,
        detectors: tuple[str, ...] = DEFAULT_DETECTORS,
        never_leave: tuple[str, ...] | frozenset[str] = NEVER_LEAVE_DEVICE,
        known_tags: tuple[str, ...] | frozenset[str] = (),
        local_token_file: str | Path | None = None,
    ) -> None:
        self._impostor: str | None = None  # why the last probe's answer was not trusted (`_agent_health`)
        self._s = _Settings(
            gateway_url=_gateway_url(gateway_url),
            api_key=_api_key(api_key),
            local_agent_url=check_loopback(local_agent_url) if local_agent_url else None,
            device=detect_device().with_overrides(device or {}),
            timeout_s=_timeout_s(timeout_s),
            max_retries=_retries(max_retries),
            allow_local_fallback=_flag("allow_local_fallback", allow_local_fallback),
            detectors=_detectors(detectors),
            never_leave=privacy_tags(never_leave if isinstance(never_leave, str) else list(never_leave)),
            known_tags=privacy_tags(known_tags if isinstance(known_tags, str) else list(known_tags)),
            local_token_file=Path(local_token_file) if local_token_file else token_file(),
        )
        self._http = self._new_http(self._s.timeout_s, trust_env=True)
        self._direct = self._new_http(self._s.timeout_s, trust_env=False)
        self.chat = _Chat(self)

    def _plan(self, model: str, messages: list[dict], stream: bool, privacy, params: dict):
        """The body, the app's tags (`privacy=`, `metadata.privacy` as the gateway reads it, and X-Tandem-Privacy in
        `extra_headers`), and why the request is private (None: it may go to the gateway)."""
        if not isinstance(messages, list | tuple):
            raise TypeError(f"messages must be a list of messages, not {type(messages).__name__}; nothing was sent")
        params, header_tags = _openai_extras(params)
        metadata = params.get("metadata") if isinstance(params.get("metadata"), dict) else {}
        misplaced = misplaced_privacy_key(metadata, self._s.never_leave | self._s.known_tags, self._s.never_leave)
        if misplaced is not None:
            raise TagError(
                f"metadata.{misplaced}: privacy tags go in metadata.privacy (or privacy=), e.g. "
                '{"privacy": "pii"}; the request was not sent anywhere'
            )
        tags = privacy_tags(privacy, metadata.get("privacy"), *header_tags)
        check_spelling(tags, self._s.never_leave, self._s.known_tags)
        # The bytes sent are made once, here, and what is scanned is read back from them: a retry re-serialized the
        # app's own lists, so a message another task or thread added while the SDK waited out a 503 went to the
        # gateway unscanned (a review: a card number in a public request)
        payload = _encoded(_body(model, messages, stream, params))
        scanned = json.loads(payload, object_pairs_hook=_keys_once)
        return payload, tags, private_reason(scanned, tags, self._s.detectors, self._s.never_leave)

    def _client_for(self, target: Target):
        return self._direct if target.direct else self._http

    @property
    def device(self) -> DeviceCapability:
        return self._s.device

    def _local_failed(self, reason: str, exc: httpx.HTTPError) -> PrivateRequestError:
        return PrivateRequestError(
            f"private request ({reason}): the local agent at {self._s.local_agent_url} failed "
            f"({type(exc).__name__}: {exc}); it was not sent anywhere else"
        )

    def _no_local_agent(self, reason: str) -> PrivateRequestError:
        if self._impostor:
            why = f"; {self._impostor}"
        elif not read_token(self._s.local_token_file):
            why = f" (and no token file at {self._s.local_token_file})"
        else:
            why = ""
        return PrivateRequestError(
            f"private request ({reason}) and no local agent at {self._s.local_agent_url}{why}; it was not sent anywhere"
        )

    def _probe(self, challenge: str) -> dict:
        """The health probe: a fresh challenge, and no token (the agent proves it holds one first)."""
        return {"url": f"{self._s.local_agent_url}/v1/local/health", "headers": {CHALLENGE_HEADER: challenge}}

    def _agent_health(self, reply: httpx.Response, challenge: str) -> dict | None:
        """The probe's answer if it comes from this device's edge agent: `kind` edge and the proof that it holds
        the token. A program that took the agent's port (another user's, on a shared machine) could answer
        `{"kind": "edge"}`: it was sent the token and the private prompt."""
        self._impostor = None
        try:
            health = reply.json() if reply.status_code == 200 else None
        except (ValueError, RecursionError):  # (nested past the parser's depth: a review)
            return None
        if not isinstance(health, dict) or health.get("kind") != "edge":
            return None
        token = read_token(self._s.local_token_file)
        if token is None:  # nothing to prove against, and no token to send: no agent of this device has run
            return None
        if not proves(token, challenge, health.get("proof")):
            self._impostor = (
                f"what answers there cannot prove it holds this device's agent token ({self._s.local_token_file}): "
                "another program on the agent's port, or an agent of another user"
            )
            return None
        return health


class Client(_ClientBase):
    _prober: httpx.Client | None = None  # the local agent's health probe's (made at the first probe)

    @staticmethod
    def _new_http(timeout_s: float, trust_env: bool) -> httpx.Client:
        return httpx.Client(timeout=timeout_s, trust_env=trust_env, verify=_verify(trust_env))

    def close(self) -> None:
        self._http.close()
        self._direct.close()
        if self._prober is not None:
            self._prober.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def local_agent(self) -> dict | None:
        """The local agent's health, or None when there is none, it is not an edge agent, or it cannot prove it
        holds this device's token (`_ClientBase._agent_health`)."""
        if not self._s.local_agent_url:
            return None
        challenge, answered = new_challenge(), []
        if self._prober is None:
            self._prober = self._new_http(LOCAL_PROBE_TIMEOUT_S, trust_env=False)

        def probe() -> None:
            try:
                with self._prober.stream("GET", **self._probe(challenge), timeout=LOCAL_PROBE_TIMEOUT_S) as reply:
                    body, started = b"", time.monotonic()
                    for chunk in reply.iter_bytes():
                        body += chunk
                        _probe_bounds(reply, body, started)
                answered.append(_whole(reply, body))
            except Exception:  # noqa: BLE001 - no answer (its client closed under it, once overrun, included)
                pass

        # In a thread of its own, waited for 2 x LOCAL_PROBE_TIMEOUT_S: headers sent a byte at a time (what answers
        # on the agent's port may be another program) held every private call for as long as they came, each read
        # within httpx's timeout (a review). One that overruns keeps its own client, which is closed and replaced.
        thread = threading.Thread(target=probe, name="tandem-local-probe", daemon=True)
        thread.start()
        thread.join(2 * LOCAL_PROBE_TIMEOUT_S + 0.05)
        if thread.is_alive():
            stuck, self._prober = self._prober, self._new_http(LOCAL_PROBE_TIMEOUT_S, trust_env=False)
            stuck.close()
            return None
        return self._agent_health(answered[0], challenge) if answered else None

    def create(self, *, model: str, messages: list[dict], stream: bool = False, privacy=None, **params):
        _open(self._http)
        timeout = _call_options(params)
        body, tags, reason = self._plan(model, messages, stream, privacy, params)
        if reason is not None:
            if self.local_agent() is None:
                raise self._no_local_agent(reason)
            try:
                return self._send(_local_target(self._s, tags), body, stream, reason, retries=0, timeout=timeout)
            except httpx.HTTPError as exc:
                raise self._local_failed(reason, exc) from exc
        if not self._s.gateway_url:
            raise GatewayUnavailable("no gateway_url configured for non-private requests")
        try:
            return self._send(_gateway_target(self._s, tags), body, stream, None, self._s.max_retries, timeout=timeout)
        except httpx.TransportError as exc:
            if _unreached(exc) and self._s.allow_local_fallback and self.local_agent() is not None:
                try:
                    return self._send(_local_target(self._s, tags), body, stream, None, retries=0, timeout=timeout)
                except httpx.HTTPError as local:
                    raise _fallback_failed(self._s, exc, local) from local
            raise _gateway_unavailable(self._s, exc) from exc

    def _send(self, target: Target, body: bytes, stream: bool, reason: str | None, retries: int, timeout):
        limit = _read_limit(timeout, self._s)
        for attempt in range(retries + 1):
            context = self._client_for(target).stream(
                "POST", target.url, content=body, headers=target.headers | JSON_BODY, timeout=timeout
            )
            response = context.__enter__()
            if response.status_code >= 400:
                try:
                    response = _whole(response, _read_within(response, limit))
                finally:
                    context.__exit__(None, None, None)
                if response.status_code in RETRY_STATUSES and attempt < retries:
                    time.sleep(_retry_delay_s(response, attempt))
                    continue
                _raise_for(response, reason is not None)
            if stream and not _is_event_stream(response):
                try:
                    head = _head(response, limit)
                finally:
                    context.__exit__(None, None, None)
                raise _not_a_stream(response, head, reason is not None)
            if stream:
                return Stream(response, target, context, reason, limit)
            try:
                answer = _answer(response, _read_within(response, limit), reason is not None)
                return _annotate(answer, target, response, reason)
            finally:
                context.__exit__(None, None, None)
        raise AssertionError("unreachable: max_retries >= 0 is checked when the client is made")


class _Completions:
    def __init__(self, client) -> None:
        self.create = client.create


class _Chat:
    def __init__(self, client) -> None:
        self.completions = _Completions(client)


# -- async ---------------------------------------------------------------------------------------


class AsyncStream:
    """`async for` OpenAI chunk dicts; `await aclose()` (or leaving an `async with` block, or cancelling the task)
    cancels the request. Failures as `Stream`'s."""

    def __init__(
        self, response: httpx.Response, target: Target, context, reason: str | None = None, idle_s: float | None = None
    ) -> None:
        self.response, self.served_by, self._context = response, target.served_by, context
        self.route = response.headers.get("x-tandem-route")
        self._target, self._reason, self._idle_s = target, reason, idle_s
        self._closed = self._read = False

    async def __aiter__(self) -> AsyncIterator[dict]:
        _read_once(self)
        try:
            async for payload in aevents(_aevent_lines(self.response, self._idle_s), require_done=True):
                yield _chunk(payload, self.response, self._reason is not None)
        except (httpx.HTTPError, json.JSONDecodeError, StreamEndedEarly) as exc:
            if not self._closed:  # (closed by the app inside its loop: the end it asked for, not a failure)
                raise _interrupted(self._target, self._reason, exc) from exc
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Once, whoever asks first: a loop that broke out of `async for` leaves its iterator to be closed later by
        the event loop, which closed the request again while the app's own `aclose` was at it ("Task exception was
        never retrieved … asynchronous generator is already running" in the app's log; a review)."""
        if self._closed:
            return
        self._closed = True
        await self._context.__aexit__(None, None, None)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()


class AsyncClient(_ClientBase):
    @staticmethod
    def _new_http(timeout_s: float, trust_env: bool) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout_s, trust_env=trust_env, verify=_verify(trust_env))

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._direct.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    async def local_agent(self) -> dict | None:
        if not self._s.local_agent_url:
            return None
        challenge = new_challenge()
        try:
            async with asyncio.timeout(2 * LOCAL_PROBE_TIMEOUT_S):  # headers sent a byte at a time too
                async with self._direct.stream("GET", **self._probe(challenge), timeout=LOCAL_PROBE_TIMEOUT_S) as reply:
                    body, started = b"", time.monotonic()
                    async for chunk in reply.aiter_bytes():
                        body += chunk
                        _probe_bounds(reply, body, started)
        except (httpx.HTTPError, TimeoutError):
            return None
        return self._agent_health(_whole(reply, body), challenge)

    async def create(self, *, model: str, messages: list[dict], stream: bool = False, privacy=None, **params):
        _open(self._http)
        timeout = _call_options(params)
        body, tags, reason = self._plan(model, messages, stream, privacy, params)
        if reason is not None:
            if await self.local_agent() is None:
                raise self._no_local_agent(reason)
            try:
                return await self._send(_local_target(self._s, tags), body, stream, reason, retries=0, timeout=timeout)
            except httpx.HTTPError as exc:
                raise self._local_failed(reason, exc) from exc
        if not self._s.gateway_url:
            raise GatewayUnavailable("no gateway_url configured for non-private requests")
        try:
            return await self._send(
                _gateway_target(self._s, tags), body, stream, None, self._s.max_retries, timeout=timeout
            )
        except httpx.TransportError as exc:
            if _unreached(exc) and self._s.allow_local_fallback and await self.local_agent() is not None:
                try:
                    return await self._send(
                        _local_target(self._s, tags), body, stream, None, retries=0, timeout=timeout
                    )
                except httpx.HTTPError as local:
                    raise _fallback_failed(self._s, exc, local) from local
            raise _gateway_unavailable(self._s, exc) from exc

    async def _send(self, target: Target, body: bytes, stream: bool, reason: str | None, retries: int, timeout):
        limit = _read_limit(timeout, self._s)
        for attempt in range(retries + 1):
            context = self._client_for(target).stream(
                "POST", target.url, content=body, headers=target.headers | JSON_BODY, timeout=timeout
            )
            try:  # the headers too: sent a byte at a time, each read within httpx's timeout, they held a call
                async with asyncio.timeout(limit):  # for as long as they came (a review)
                    response = await context.__aenter__()
            except TimeoutError:
                raise httpx.ReadTimeout(f"no answer came within {limit:g} s") from None
            if response.status_code >= 400:
                try:
                    response = _whole(response, await _aread_within(response, limit))
                finally:
                    await context.__aexit__(None, None, None)
                if response.status_code in RETRY_STATUSES and attempt < retries:
                    await asyncio.sleep(_retry_delay_s(response, attempt))
                    continue
                _raise_for(response, reason is not None)
            if stream and not _is_event_stream(response):
                try:
                    head = await _ahead(response, limit)
                finally:
                    await context.__aexit__(None, None, None)
                raise _not_a_stream(response, head, reason is not None)
            if stream:
                return AsyncStream(response, target, context, reason, limit)
            try:
                answer = _answer(response, await _aread_within(response, limit), reason is not None)
                return _annotate(answer, target, response, reason)
            finally:
                await context.__aexit__(None, None, None)
        raise AssertionError("unreachable: max_retries >= 0 is checked when the client is made")

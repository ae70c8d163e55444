"""Any OpenAI-compatible HTTP server as a backend: vLLM, SGLang, llama.cpp server, Ollama, another Tandem gateway.

The gateway has already tokenized, so the prompt goes to `/v1/completions` as
token ids (vLLM, SGLang, llama.cpp and Tandem accept them), or, with
`prompt_format: text` (Ollama), as the text those ids spell. Health is
`GET /v1/models` listing the upstream model. Such a server cannot vouch for
its own kind: it counts as the kind of its pool, so an HTTP member of an
edge pool is trusted with private prompts. Put only servers on the device
or inside its trust boundary there. Prefix hints for these backends come
from the approximate index, not from worker events.
"""

import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable

import grpc
import httpx
from tandem_sdk.sse import Lines, aevents

from gateway import via
from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.backends.worker_backend import BackendError, WorkerBackend
from proto.gen import worker_pb2

_ERROR_CODE = re.compile(r"[a-z][a-z0-9_]{0,39}")  # OpenAI's error codes (`routing_loop`, `server_error`)

HEALTH_TIMEOUT_S = 1.0
MAX_ERROR_BYTES = 64 * 1024  # of an upstream's error body, read (its words go to the log, cut at 2,000)
MAX_LINE_CHARS = 1 << 20  # of one SSE line: an event carries a few tokens
MAX_TEXT_PER_TOKEN = 256  # characters an answer may carry per token asked (a token is a few)
# An upstream's refusal that says the upstream is wrong, not the request: a redirect, its key, its path, its timeout,
# its load. A wrong key was a 400 to every caller, no failover, the breaker closed, its words shown (a review).
_THE_SERVERS = frozenset({301, 302, 303, 307, 308, 401, 403, 404, 405, 407, 408, 421, 429})
PRIVATE_HEADERS = {"X-Tandem-Privacy": "private"}  # a never-leave tag in every policy that keeps the default tags


class HttpWorkerBackend(WorkerBackend):
    reports_load = False  # /v1/models says nothing of its queue or KV: no autoscaling signal reads them as 0

    def __init__(
        self,
        endpoint: str,
        model_id: str,
        pool_kind: str,
        breaker: CircuitBreaker | None = None,
        upstream_model: str | None = None,
        decode: Callable[[list[int]], str] | None = None,
        send_cache_salt: bool = False,
    ) -> None:
        super().__init__(endpoint, model_id, pool_kind, breaker)
        self._send_cache_salt = send_cache_salt
        self._base = endpoint.rstrip("/").removesuffix("/v1")
        self._upstream_model = upstream_model or model_id
        self._decode = decode  # set: send text (for servers that take no token ids)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=2.0))

    async def _fetch_stats(self) -> worker_pb2.StatsReply:
        try:
            response = await self._client.get(f"{self._base}/v1/models", timeout=HEALTH_TIMEOUT_S)
            response.raise_for_status()
            served = [m.get("id") for m in response.json().get("data", [])]
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise BackendError(
                self.endpoint, grpc.StatusCode.UNAVAILABLE, f"GET /v1/models: {exc}", said="GET /v1/models failed"
            ) from exc
        # Speak in the gateway's model id once the upstream is seen to serve the configured model.
        model = self.model_id if self._upstream_model in served else ",".join(map(str, served))
        return worker_pb2.StatsReply(model_id=model, kind=self.pool_kind, execution_provider="openai-http")

    def _body(self, request: worker_pb2.GenerateRequest) -> dict:
        s = request.sampling
        ids = list(request.prompt_token_ids)
        body = {
            "model": self._upstream_model,
            "prompt": self._decode(ids) if self._decode else ids,
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p or 1.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if s.HasField("seed"):
            body["seed"] = s.seed
        if s.top_k:
            body["top_k"] = s.top_k  # an extension vLLM, SGLang and llama.cpp accept
        if s.min_p:
            body["min_p"] = s.min_p  # so is this one
        if s.stop_strings:
            body["stop"] = list(s.stop_strings)
        # OpenAI's fields as they are, and vLLM's and SGLang's extensions by their names there
        for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
            if getattr(s, name):
                body[name] = getattr(s, name)
        if s.logit_bias:
            body["logit_bias"] = {str(token): bias for token, bias in s.logit_bias.items()}
        if s.ignore_eos:
            body["ignore_eos"] = True
        if s.stop_token_ids:
            body["stop_token_ids"] = list(s.stop_token_ids)
        if self._salted(request):
            body["cache_salt"] = request.cache_salt  # vLLM: prefix-cache blocks are never shared across salts
        return body

    async def _stream(
        self, request: worker_pb2.GenerateRequest, timeout_s: float
    ) -> AsyncIterator[worker_pb2.GenerateChunk]:
        if request.sampling.HasField("top_logprobs") or request.sampling.HasField("prompt_logprobs"):  # named by text
            raise BackendError.ours(
                self.endpoint, grpc.StatusCode.INVALID_ARGUMENT, "logprobs are not available from an HTTP pool"
            )
        if request.sampling.grammar:
            raise BackendError.ours(
                self.endpoint, grpc.StatusCode.INVALID_ARGUMENT, "response_format is not available from an HTTP pool"
            )
        if request.sampling.max_tokens == 0:  # the prompt alone (the gateway echoes it): nothing to ask the upstream
            yield worker_pb2.GenerateChunk(finish_reason="length", usage=_usage(None, len(request.prompt_token_ids)))
            return
        finish, usage = None, None
        try:
            # A private request says so: another Tandem gateway behind this one keeps it on its edge (untagged, it
            # routed it to its own cloud pool), and a server that does not know the header ignores it.
            headers = {via.HEADER: via.onward()} | (PRIVATE_HEADERS if request.private else {})
            async with self._client.stream(
                "POST", f"{self._base}/v1/completions", json=self._body(request), headers=headers, timeout=timeout_s
            ) as response:
                if response.status_code != 200:
                    raise self._error(response.status_code, await _head_of(response, MAX_ERROR_BYTES))
                most = MAX_TEXT_PER_TOKEN * max(request.sampling.max_tokens, 1)
                sent = 0
                async for event in aevents(_bounded_lines(response, MAX_LINE_CHARS)):  # the SDK's SSE decoder
                    if not isinstance(event, dict):
                        raise ValueError(f"an event that is no JSON object ({type(event).__name__})")
                    if "error" in event:  # OpenAI's {"error": {"message": ...}}, or a server's bare {"error": "..."}
                        error = event["error"]
                        message = error.get("message") if isinstance(error, dict) else error
                        raise BackendError(
                            self.endpoint, grpc.StatusCode.INTERNAL, str(message)[:2000], said="an error event"
                        )
                    if event.get("usage"):
                        usage = event["usage"]
                    for text, finished in _choices(event):
                        if text:
                            sent += len(text)
                            if sent > most:
                                raise ValueError(f"over {most:,} characters for {request.sampling.max_tokens} tokens")
                            yield worker_pb2.GenerateChunk(text=text)
                        finish = finished or finish
                ending = _usage(usage, len(request.prompt_token_ids))
        except httpx.TransportError as exc:
            self._set_problem(f"UNAVAILABLE: {exc}")
            raise BackendError(self.endpoint, grpc.StatusCode.UNAVAILABLE, str(exc)) from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BackendError(
                self.endpoint, grpc.StatusCode.INTERNAL, f"malformed stream: {exc}", said="a malformed stream"
            ) from exc
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            # An answer of another shape (`data: 5`, choices null, a usage of words or 2**40): the backend's fault,
            # counted and tried elsewhere; it was a 500, the backend never blamed (a review)
            raise BackendError(
                self.endpoint,
                grpc.StatusCode.INTERNAL,
                f"a malformed answer: {str(exc)[:300]}",
                said="a malformed answer",
            ) from exc
        if finish is None:
            raise BackendError.ours(self.endpoint, grpc.StatusCode.INTERNAL, "stream ended without a finish reason")
        # The finish reason waits for the usage chunk, so the last chunk carries both, as from a Tandem worker.
        yield worker_pb2.GenerateChunk(finish_reason=finish, usage=ending)

    def _error(self, status: int, text: str) -> BackendError:
        """An upstream's refusal: a request's fault (4xx but 429) in its words, which the caller reads with addresses
        hidden; a failure as its status and OpenAI's error `code` (`HTTP 508 (routing_loop)`), its words in the log
        only (an error page can name its hosts, a review)."""
        message, code = text, None
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            error = json.loads(text)["error"]
            message, code = error["message"], error.get("code")
        details = f"HTTP {status}: {str(message)[:2000]}"
        if status >= 500 or status in _THE_SERVERS:
            named = f" ({code})" if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else ""
            return BackendError(self.endpoint, grpc.StatusCode.UNAVAILABLE, details, said=f"HTTP {status}{named}")
        return BackendError(self.endpoint, grpc.StatusCode.INVALID_ARGUMENT, details)

    def _salted(self, request: worker_pb2.GenerateRequest) -> bool:
        """Whether the request carries its tenant's cache salt to the server (`send_cache_salt`)."""
        return self._send_cache_salt and bool(request.cache_salt)

    @property
    def tenants_share_its_cache(self) -> bool:
        """Its prefix cache is every tenant's: no salt is sent to keep them apart."""
        return not self._send_cache_salt

    async def close(self) -> None:
        await self._client.aclose()


def _usage(usage: dict | None, num_prompt: int) -> worker_pb2.Usage:
    """The upstream's usage; ValueError (a malformed answer) for one that is no object of whole numbers from 0."""
    usage = usage or {}
    if not isinstance(usage, dict):
        raise ValueError(f"a usage that is no object ({type(usage).__name__})")
    details = usage.get("prompt_tokens_details") or {}
    counts = (
        usage.get("prompt_tokens", num_prompt),
        usage.get("completion_tokens", 0),
        (details.get("cached_tokens") if isinstance(details, dict) else None) or 0,
    )
    if not all(type(n) is int and 0 <= n < 1 << 31 for n in counts):
        raise ValueError(f"usage counts that are no whole numbers from 0: {str(counts)[:100]}")
    return worker_pb2.Usage(prompt_tokens=counts[0], completion_tokens=counts[1], cached_prompt_tokens=counts[2])


def _choices(event: dict):
    """Each choice's (text, finish_reason) of an event; ValueError for a shape no completion has."""
    choices = event.get("choices") or []
    if not isinstance(choices, list):
        raise ValueError(f"choices that are no list ({type(choices).__name__})")
    for choice in choices:
        if not isinstance(choice, dict):
            raise ValueError(f"a choice that is no object ({type(choice).__name__})")
        text, finish = choice.get("text") or "", choice.get("finish_reason")
        if not isinstance(text, str) or not (finish is None or isinstance(finish, str)):
            raise ValueError("a choice whose text or finish_reason is no string")
        yield text, finish


async def _head_of(response: httpx.Response, most: int) -> str:
    """The first `most` bytes of an error's body: a 200 MB error page was read whole (+250 MB of the gateway's
    memory, kept: a review)."""
    head = b""
    async for part in response.aiter_bytes():
        head += part
        if len(head) >= most:
            break
    return head[:most].decode(errors="replace")


async def _bounded_lines(response: httpx.Response, most: int):
    """The body's lines, ValueError for one longer than `most` characters: one 60 MB SSE line was held whole
    (+420 MB) and sent on to the caller for max_tokens 4 (a review)."""
    lines = Lines(most)
    async for text in response.aiter_text():
        for line in lines.feed(text):
            yield line
    for line in lines.end():
        yield line

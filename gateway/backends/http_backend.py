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
from tandem_sdk.sse import aevents

from gateway import via
from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.backends.worker_backend import BackendError, WorkerBackend
from proto.gen import worker_pb2

_ERROR_CODE = re.compile(r"[a-z][a-z0-9_]{0,39}")  # OpenAI's error codes (`routing_loop`, `server_error`)

HEALTH_TIMEOUT_S = 1.0
PRIVATE_HEADERS = {"X-Tandem-Privacy": "private"}  # a never-leave tag in every policy that keeps the default tags


class HttpWorkerBackend(WorkerBackend):
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
        if self._send_cache_salt and request.cache_salt:
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
                    raise self._error(response.status_code, (await response.aread()).decode(errors="replace"))
                async for event in aevents(response.aiter_lines()):  # the SDK's decoder (tandem_sdk/sse.py)
                    if "error" in event:  # OpenAI's {"error": {"message": ...}}, or a server's bare {"error": "..."}
                        error = event["error"]
                        message = error.get("message") if isinstance(error, dict) else error
                        raise BackendError(
                            self.endpoint, grpc.StatusCode.INTERNAL, str(message)[:2000], said="an error event"
                        )
                    if event.get("usage"):
                        usage = event["usage"]
                    for choice in event.get("choices", []):
                        if choice.get("text"):
                            yield worker_pb2.GenerateChunk(text=choice["text"])
                        finish = choice.get("finish_reason") or finish
        except httpx.TransportError as exc:
            self._set_problem(f"UNAVAILABLE: {exc}")
            raise BackendError(self.endpoint, grpc.StatusCode.UNAVAILABLE, str(exc)) from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BackendError(
                self.endpoint, grpc.StatusCode.INTERNAL, f"malformed stream: {exc}", said="a malformed stream"
            ) from exc
        if finish is None:
            raise BackendError.ours(self.endpoint, grpc.StatusCode.INTERNAL, "stream ended without a finish reason")
        # The finish reason waits for the usage chunk, so the last chunk carries both, as from a Tandem worker.
        yield worker_pb2.GenerateChunk(finish_reason=finish, usage=_usage(usage, len(request.prompt_token_ids)))

    def _error(self, status: int, text: str) -> BackendError:
        """An upstream's refusal: a request's fault (4xx but 429) in its words, which the caller reads with addresses
        hidden; a failure as its status and OpenAI's error `code` (`HTTP 508 (routing_loop)`), its words in the log
        only (an error page can name its hosts, a review)."""
        message, code = text, None
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            error = json.loads(text)["error"]
            message, code = error["message"], error.get("code")
        details = f"HTTP {status}: {str(message)[:2000]}"
        if status >= 500 or status == 429:
            named = f" ({code})" if isinstance(code, str) and _ERROR_CODE.fullmatch(code) else ""
            return BackendError(self.endpoint, grpc.StatusCode.UNAVAILABLE, details, said=f"HTTP {status}{named}")
        return BackendError(self.endpoint, grpc.StatusCode.INVALID_ARGUMENT, details)

    async def close(self) -> None:
        await self._client.aclose()


def _usage(usage: dict | None, num_prompt: int) -> worker_pb2.Usage:
    usage = usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return worker_pb2.Usage(
        prompt_tokens=usage.get("prompt_tokens", num_prompt),
        completion_tokens=usage.get("completion_tokens", 0),
        cached_prompt_tokens=cached,
    )

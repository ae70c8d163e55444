"""The contract between a worker's gRPC server and its engine.

Both worker kinds serve the same `Worker` service through `worker_service`;
what differs is the `Engine` behind it. The server only translates, so the
paged engine (cloud) can replace the serial one without touching it.
"""

import asyncio
import math
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

# Below this a temperature divides logits into overflow (1e-40: every probability inf); 0 means greedy.
MIN_TEMPERATURE = 0.01
MAX_TOP_LOGPROBS = 20  # OpenAI's limit
# A repetition penalty divides positive logits by itself: below this, into overflow, as a tiny temperature would.
MIN_REPETITION_PENALTY = 0.01


def _float32(value: float) -> float:
    """`value` as the worker's proto carries it (a float): 0.01 arrives as 0.009999999776482582."""
    return struct.unpack("f", struct.pack("f", value))[0]


# The lower bounds as checked here: the documented minimum itself passes, after its trip through a float32.
_MIN_TEMPERATURE_32, _MIN_REPETITION_PENALTY_32 = _float32(MIN_TEMPERATURE), _float32(MIN_REPETITION_PENALTY)


class RequestRejected(ValueError):
    """The request cannot be served as asked (too long, bad parameters); maps to INVALID_ARGUMENT."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    ignore_eos: bool = False
    presence_penalty: float = 0.0  # OpenAI's, -2 to 2, on output tokens
    frequency_penalty: float = 0.0  # OpenAI's, -2 to 2, times each output token's count
    repetition_penalty: float = 1.0  # HF's and vLLM's, 0.01 to 10, on prompt and output tokens; 1 is off
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, -100 to 100) pairs
    top_logprobs: int | None = None  # report each token's log-probability and this many alternatives (0-20)
    grammar: str = ""  # an llguidance grammar the answer must follow (serving/grammar.py); empty: none
    # Score the prompt too: each prompt token's log-probability (the first has none) and this many alternatives.
    prompt_logprobs: int | None = None

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
            if not math.isfinite(getattr(self, name)):
                raise RequestRejected(f"{name} must be a finite number, got {getattr(self, name)}")
        if self.temperature != 0 and not _MIN_TEMPERATURE_32 <= self.temperature:
            raise RequestRejected(
                f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {self.temperature}"
            )
        if not 0 < self.top_p <= 1:
            raise RequestRejected(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise RequestRejected(f"top_k must be >= 0, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise RequestRejected(f"min_p must be in [0, 1], got {self.min_p}")
        if self.max_tokens < 0:
            raise RequestRejected(f"max_tokens must be >= 0 (0: the prompt alone), got {self.max_tokens}")
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                raise RequestRejected(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if not _MIN_REPETITION_PENALTY_32 <= self.repetition_penalty <= 10:
            raise RequestRejected(
                f"repetition_penalty must be in [{MIN_REPETITION_PENALTY}, 10], got {self.repetition_penalty}"
            )
        for token, bias in self.logit_bias:
            if token < 0 or not (math.isfinite(bias) and -100 <= bias <= 100):
                raise RequestRejected(f"logit_bias needs token ids >= 0 and biases in [-100, 100], got {token}: {bias}")
        for name in ("top_logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None and not 0 <= getattr(self, name) <= MAX_TOP_LOGPROBS:
                raise RequestRejected(f"{name} must be in [0, {MAX_TOP_LOGPROBS}], got {getattr(self, name)}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tenant: str = ""
    priority: int = 0
    private: bool = False
    cache_salt: str = ""  # salts the prefix-hash chain (proto/prefix_hash.py); empty: the tenant

    @property
    def prefix_salt(self) -> str:
        return self.cache_salt or self.tenant


# What one request may ask of an engine, past which it is refused (the gateway's API allows a fraction of each:
# 4 stop strings of 256 characters, 300 biases, 64 stop ids). Each is read at every step of the request, on the
# engine thread every sequence shares: 40,000 stop strings from a direct gRPC client slowed the others' decode 9x,
# 300,000 biases 70x (a review).
MAX_STOP_STRINGS, MAX_STOP_STRING_CHARS, MAX_LOGIT_BIASES, MAX_STOP_TOKEN_IDS = 16, 1024, 1024, 256


def check_request(request: GenerationRequest, max_context_tokens: int, vocab_size: int) -> None:
    """Reject, before queueing, a request that could never run to max_tokens, asks more than an engine reads at each
    step, or names a token the model has not (the gateway checks its callers' ids; a direct gRPC client's `-5` or
    `10**6` raised IndexError on the engine thread, which failed every request in the batch: a review)."""
    num_prompt = len(request.prompt_token_ids)
    if num_prompt == 0:
        raise RequestRejected("prompt has no tokens")
    s = request.sampling
    if len(s.stop_strings) > MAX_STOP_STRINGS or any(len(stop) > MAX_STOP_STRING_CHARS for stop in s.stop_strings):
        raise RequestRejected(
            f"stop_strings: at most {MAX_STOP_STRINGS} of at most {MAX_STOP_STRING_CHARS} characters each"
        )
    if len(s.logit_bias) > MAX_LOGIT_BIASES:
        raise RequestRejected(f"logit_bias: at most {MAX_LOGIT_BIASES} tokens, got {len(s.logit_bias)}")
    if len(s.stop_token_ids) > MAX_STOP_TOKEN_IDS:
        raise RequestRejected(f"stop_token_ids: at most {MAX_STOP_TOKEN_IDS}, got {len(s.stop_token_ids)}")
    if min(request.prompt_token_ids) < 0 or max(request.prompt_token_ids) >= vocab_size:
        bad = [t for t in request.prompt_token_ids if not 0 <= t < vocab_size][:5]
        raise RequestRejected(f"prompt_token_ids: ids out of range [0, {vocab_size}): {bad}")
    if bad := [t for t in s.stop_token_ids if not 0 <= t < vocab_size][:5]:
        raise RequestRejected(f"stop_token_ids: ids out of range [0, {vocab_size}): {bad}")
    if bad := [t for t, _ in s.logit_bias if not 0 <= t < vocab_size][:5]:
        raise RequestRejected(f"logit_bias: token ids out of range [0, {vocab_size}): {bad}")
    if num_prompt + request.sampling.max_tokens > max_context_tokens:
        raise RequestRejected(
            f"prompt ({num_prompt} tokens) + max_tokens ({request.sampling.max_tokens}) "
            f"exceeds this worker's context of {max_context_tokens} tokens"
        )


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0
    queue_wait_s: float = 0.0  # arrival to first scheduling; for the worker's trace, not sent on the wire


@dataclass(frozen=True)
class GenerationChunk:
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str | None = None  # "stop", "length" or "cancelled" on the last chunk
    usage: Usage | None = None
    logprobs: tuple[float, ...] = ()  # of each token in token_ids, under the raw logits (engines that report them)
    # With top_logprobs asked: per token in token_ids, the most likely alternatives as (token id, logprob) pairs.
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()
    # With prompt_logprobs asked, once, on a chunk of its own before the first token's: the log-probability of
    # prompt tokens 1.. (token 0 has no context) and, per token, the alternatives.
    prompt_logprobs: tuple[float, ...] = ()
    prompt_top_logprobs: tuple[tuple[tuple[int, float], ...], ...] = ()


@dataclass(frozen=True)
class EngineStats:
    model_id: str
    kind: str
    execution_provider: str
    max_context_tokens: int
    queue_depth: int = 0
    running: int = 0
    kv_blocks_total: int = 0
    kv_blocks_used: int = 0
    block_size_tokens: int = 0
    prefix_hit_tokens: int = 0
    prefix_query_tokens: int = 0
    tokens_per_s: float = 0.0
    memory_bytes: int = 0
    memory_watermark_bytes: int = 0
    requests_total: int = 0


class Engine(Protocol):
    kind: str  # "cloud" or "edge"
    execution_provider: str  # what really runs the model, e.g. "CPUExecutionProvider", "torch-cuda"

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        """Stream chunks; closing the iterator early cancels the request and frees its memory."""
        ...

    def stats(self) -> EngineStats: ...

    def close(self) -> None: ...


class ChunkChannel:
    """One request's chunks from an engine's thread to the caller's event loop: `emit` (thread-safe) from the
    engine thread, `async for` on the loop, which ends after the chunk with a finish reason and raises an
    exception emitted instead. `finished` says whether the answer ran to its end (else the caller left early and
    the engine should drop the request). Both engines (edge_agent/serial_engine.py, cloud_worker/engine) use it."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[GenerationChunk | Exception] = asyncio.Queue()
        self.finished = False

    def emit(self, chunk: "GenerationChunk | Exception") -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, chunk)

    async def __aiter__(self) -> AsyncIterator["GenerationChunk"]:
        while True:
            chunk = await self._queue.get()
            if isinstance(chunk, Exception):
                self.finished = True
                raise chunk
            yield chunk
            if chunk.finish_reason is not None:
                self.finished = True
                return

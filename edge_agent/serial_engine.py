"""An engine that runs one sequence at a time on a background thread.

It is the simple engine both worker kinds start with: a `StepModel` gives
logits for a prompt and then for one token at a time, and this class does
the rest (queueing, sampling, stop conditions, detokenization, cancellation,
stats). The cloud worker's paged engine replaces it behind `Engine`.
"""

import queue
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from tokenizers import Tokenizer

from serving.detokenizer import IncrementalDetokenizer
from serving.engine_api import (
    ChunkChannel,
    EngineStats,
    GenerationChunk,
    GenerationRequest,
    RequestRejected,
    Usage,
    check_request,
)
from serving.grammar import constraint_for
from serving.logits_processors import apply_penalties, mask_logits, score
from serving.process_memory import memory_bytes, memory_watermark_bytes
from serving.sampling import request_seed, sample_token
from serving.sliding_count import SlidingCount

TOKEN_RATE_WINDOW_S = 10.0


class StepModel(Protocol):
    max_context_tokens: int
    vocab_size: int  # the logits' width: a token id is below it

    def prefill(self, prompt_token_ids: list[int]) -> tuple[torch.Tensor, Any]:
        """Logits [vocab] for the token after the prompt, and the model's state."""
        ...

    def decode(self, state: Any, token_id: int, position: int) -> tuple[torch.Tensor, Any]:
        """Logits [vocab] after appending token_id at position, and the new state."""
        ...

    # Optional: logits [tokens, vocab] at every prompt position, and the state (for prompt_logprobs).
    # def prefill_all(self, prompt_token_ids: list[int]) -> tuple[torch.Tensor, Any]: ...


def _prompt_scores(every: torch.Tensor, prompt: list[int], k: int) -> GenerationChunk:
    """The chunk that scores prompt tokens 1.. from the logits at positions 0.."""
    chosen, tops = score(every[:-1], prompt[1:], [k] * (len(prompt) - 1))
    return GenerationChunk((), "", prompt_logprobs=tuple(chosen), prompt_top_logprobs=tuple(tops))


@dataclass
class _Job:
    request: GenerationRequest
    channel: ChunkChannel
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted_s: float = field(default_factory=time.monotonic)

    def emit(self, chunk: GenerationChunk | Exception) -> None:
        self.channel.emit(chunk)


class SerialEngine:
    def __init__(
        self,
        model: StepModel,
        tokenizer: Tokenizer,
        eos_token_ids: tuple[int, ...],
        model_id: str,
        kind: str,
        execution_provider: str,
    ) -> None:
        self.kind, self.execution_provider = kind, execution_provider
        self._model, self._tokenizer, self._eos_token_ids = model, tokenizer, frozenset(eos_token_ids)
        self._model_id = model_id
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._waiting: set[int] = set()  # the queued jobs' ids, less those whose caller left (Stats' queue depth)
        self._num_running = 0
        self._num_requests = 0
        self._tokens = SlidingCount(TOKEN_RATE_WINDOW_S)
        self._thread = threading.Thread(target=self._run, name=f"{kind}-engine", daemon=True)
        self._thread.start()

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        check_request(request, self._model.max_context_tokens, self._model.vocab_size)
        if request.sampling.prompt_logprobs is not None and not hasattr(self._model, "prefill_all"):
            raise RequestRejected("prompt log-probabilities (echo with logprobs) are not available on this engine")
        job = _Job(request, ChunkChannel())
        self._waiting.add(id(job))
        self._jobs.put(job)
        self._num_requests += 1
        try:
            async for chunk in job.channel:
                yield chunk
        finally:
            job.cancelled.set()  # no-op when finished; frees the sequence when the caller left
            self._waiting.discard(id(job))  # a job left in the queue is skipped at its turn: it waits for nothing

    def stats(self) -> EngineStats:
        return EngineStats(
            model_id=self._model_id,
            kind=self.kind,
            execution_provider=self.execution_provider,
            max_context_tokens=self._model.max_context_tokens,
            queue_depth=len(self._waiting),
            running=self._num_running,
            tokens_per_s=self._tokens.per_second(),
            memory_bytes=memory_bytes(),
            memory_watermark_bytes=memory_watermark_bytes(),
            requests_total=self._num_requests,
        )

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._waiting.discard(id(job))
            if job.cancelled.is_set():
                continue
            self._num_running = 1
            try:
                self._serve(job)
            except Exception as exc:  # noqa: BLE001 - the caller must hear of it, the thread must live
                job.emit(exc)
            finally:
                self._num_running = 0

    @torch.inference_mode()
    def _serve(self, job: _Job) -> None:
        request, params = job.request, job.request.sampling
        prompt = list(request.prompt_token_ids)
        seed = request_seed(params)
        detok = IncrementalDetokenizer(self._tokenizer, params.stop_strings)
        stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else self._eos_token_ids)
        queue_wait_s = time.monotonic() - job.submitted_s
        constraint = constraint_for(params, self._tokenizer, self._eos_token_ids)
        if params.prompt_logprobs is None:
            logits, state = self._model.prefill(prompt)
        else:
            every, state = self._model.prefill_all(prompt)
            logits = every[-1]
            job.emit(_prompt_scores(every.float(), prompt, params.prompt_logprobs))
        output: list[int] = []
        num_out, finish = 0, None if params.max_tokens else "length"  # 0: the prompt alone (echo)
        while finish is None:
            if job.cancelled.is_set():
                finish = "cancelled"
                break
            logits = logits.float()
            processed = mask_logits(apply_penalties(logits[None], [params], [prompt], [output]), [constraint])
            token = sample_token(processed[0], params, seed, num_out)
            output.append(token)
            num_out += 1
            self._tokens.add()
            if constraint is not None and token not in stop_ids:
                constraint.consume(token)
            # The parser gave up, on the token or computing this step's mask (which then allowed end-of-sequence
            # alone): no answer, and never one that ended by itself (a review)
            if constraint is not None and (failed := constraint.failure()) is not None:
                raise failed
            if token in stop_ids:
                finish, text = "stop", detok.flush()
            else:
                chosen, top = score(logits[None], [token], [params.top_logprobs])
                text = detok.push(token, chosen[0], top[0] if params.top_logprobs is not None else None)
                if detok.is_stopped:
                    finish = "stop"
                elif constraint is not None and constraint.done:
                    finish, text = "stop", text + detok.flush()
                elif num_out >= params.max_tokens:
                    text += detok.flush()  # (which may end in a stop string: bytes of no character become U+FFFD)
                    finish = "stop" if detok.is_stopped else "length"
            ids, logprobs, tops = detok.take()  # tokens leave with their text; a stop string's never do
            if finish is None:
                job.emit(GenerationChunk(ids, text, logprobs=logprobs, top_logprobs=tops))
                logits, state = self._model.decode(state, token, len(prompt) + num_out - 1)
            else:
                usage = Usage(len(prompt), num_out, queue_wait_s=queue_wait_s)
                job.emit(GenerationChunk(ids, text, finish, usage, logprobs, tops))
                return
        job.emit(GenerationChunk((), "", finish, Usage(len(prompt), num_out, queue_wait_s=queue_wait_s)))

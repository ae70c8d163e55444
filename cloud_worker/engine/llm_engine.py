"""The paged engine: continuous batching over a block KV cache with prefix caching.

A background thread runs `step()` while there is work: `schedule()` picks the
step's sequences and tokens, the model runner computes and samples, and
`postprocess` streams each new token to its caller and retires sequences
that finished. New requests and cancellations reach the thread through
queues and take effect at the next step boundary; a finished or cancelled
sequence frees its blocks in the step it ends.
"""

import asyncio
import logging
import os
import queue
import random
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from cloud_worker.engine.block_manager import BlockEvent, BlockManager
from cloud_worker.engine.config import EngineConfig
from cloud_worker.engine.scheduler import ScheduledSeq, Scheduler
from cloud_worker.engine.sequence import Sequence
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
from serving.process_memory import memory_bytes, memory_watermark_bytes
from serving.sliding_count import SlidingCount

if TYPE_CHECKING:  # the model's runner needs torch; the simulated worker (bench/) runs this engine without
    from cloud_worker.engine.model_runner import ModelRunner

log = logging.getLogger(__name__)
TOKEN_RATE_WINDOW_S = 10.0


@dataclass(eq=False)
class _Job:
    seq: Sequence
    channel: ChunkChannel
    detok: IncrementalDetokenizer
    stop_ids: frozenset[int]
    cancelled: bool = False
    step_times: list[float] = field(default_factory=list)

    def emit(self, chunk: GenerationChunk | Exception) -> None:
        self.channel.emit(chunk)


class PagedEngine:
    kind = "cloud"

    def __init__(
        self,
        runner: "ModelRunner",
        block_manager: BlockManager,
        config: EngineConfig,
        tokenizer: Tokenizer,
        eos_token_ids: tuple[int, ...],
        model_id: str,
        max_context_tokens: int,
        vocab_size: int,
        execution_provider: str,
        on_block_events: Callable[[list[BlockEvent]], None] | None = None,
    ) -> None:
        self.execution_provider = execution_provider
        self.model_id = model_id
        self.block_manager = block_manager
        self.scheduler = Scheduler(config, block_manager)
        self.runner, self._tokenizer, self._eos_token_ids = runner, tokenizer, frozenset(eos_token_ids)
        self._max_context_tokens = min(max_context_tokens, block_manager.num_blocks * block_manager.block_size_tokens)
        self._vocab_size = vocab_size  # the embedding's rows: a token id is below it
        self._on_block_events = on_block_events
        self._inbox: queue.SimpleQueue[_Job | int | None] = queue.SimpleQueue()  # job, cancelled job's key, or stop
        self._jobs: dict[int, _Job] = {}  # by Sequence.arrival (request ids come from callers, may repeat)
        self._tokens = SlidingCount(TOKEN_RATE_WINDOW_S)
        self._closed = False
        self.num_steps = 0
        self.num_requests = 0
        self._thread = threading.Thread(target=self._run, name="paged-engine", daemon=True)

    def start(self) -> "PagedEngine":
        """Start the engine thread; `close()` stops it (cloud_worker/build.py pairs them)."""
        self._thread.start()
        return self

    # -- the caller's side (event loop) ---------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationChunk]:
        self._check(request)
        params = request.sampling
        seq = Sequence(
            request,
            self.model_id,
            self.block_manager.block_size_tokens,
            seed=params.seed if params.seed is not None else random.getrandbits(63),
            # Compiling a grammar can take a while: off the event loop that serves every other request.
            constraint=await asyncio.to_thread(constraint_for, params, self._tokenizer, self._eos_token_ids)
            if params.grammar
            else None,
        )
        job = _Job(
            seq,
            ChunkChannel(),
            IncrementalDetokenizer(self._tokenizer, params.stop_strings),
            frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self._eos_token_ids),
        )
        self._inbox.put(job)
        try:
            async for chunk in job.channel:
                yield chunk
        finally:
            if not job.channel.finished:
                self._inbox.put(seq.arrival)  # the caller left: free the sequence at the next step

    def _check(self, request: GenerationRequest) -> None:
        if self._closed:
            raise RequestRejected("the engine is shutting down")
        check_request(request, self._max_context_tokens, self._vocab_size)

    def stats(self) -> EngineStats:
        bm = self.block_manager
        return EngineStats(
            model_id=self.model_id,
            kind=self.kind,
            execution_provider=self.execution_provider,
            max_context_tokens=self._max_context_tokens,
            queue_depth=len(self.scheduler.waiting) + self._inbox.qsize(),
            running=len(self.scheduler.running),
            kv_blocks_total=bm.num_blocks,
            kv_blocks_used=bm.num_used_blocks,
            block_size_tokens=bm.block_size_tokens,
            prefix_hit_tokens=bm.num_hit_tokens,
            prefix_query_tokens=bm.num_query_tokens,
            tokens_per_s=self._tokens.per_second(),
            memory_bytes=memory_bytes(),
            memory_watermark_bytes=memory_watermark_bytes(),
            requests_total=self.num_requests,
        )

    def close(self) -> None:
        self._closed = True
        self._inbox.put(None)
        self._thread.join(timeout=10)
        self.runner.close()

    # -- the engine thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            # Block for input only when idle; otherwise take what has arrived and step.
            if not self._drain_inbox(block=not self.scheduler.has_work()):
                break
            if self.scheduler.has_work():
                try:
                    self.step()
                except Exception as exc:  # noqa: BLE001 - fail the requests in flight, keep the worker alive
                    if self.runner.tensor_parallel:  # the ranks are out of step for good: this worker stops
                        self._stop_for_good(exc)
                        break
                    log.exception("engine step failed")
                    self._fail_all(exc)
        for job in list(self._jobs.values()):
            self._retire(job, "cancelled")

    def _stop_for_good(self, exc: Exception) -> None:
        """A step failed under tensor parallelism (a rank gone or stalled past the collectives' timeout): no step can
        run again, yet the worker said SERVING and failed every request with gloo's words for good (a review). The
        requests in flight fail, and the worker stops, saying why, for its supervisor to start it anew."""
        why = f"a tensor-parallel step failed ({type(exc).__name__}: {str(exc)[:200]})"
        log.error("%s: the worker stops", why)
        self.runner.abandon(why)
        self._fail_all(exc)
        os.kill(os.getpid(), signal.SIGTERM)

    def _drain_inbox(self, block: bool) -> bool:
        """Apply new requests and cancellations; False once close() was called."""
        while True:
            try:
                item = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if item is None:
                return False
            if isinstance(item, int):
                job = self._jobs.get(item)
                if job is not None:
                    self._retire(job, "cancelled")
            else:
                self._jobs[item.seq.arrival] = item
                self.num_requests += 1
                self.scheduler.add(item.seq)

    def step(self) -> None:
        scheduled = self.scheduler.schedule()
        if scheduled:
            self._postprocess(scheduled, *self.runner.run(scheduled))

    def _postprocess(
        self, scheduled: list[ScheduledSeq], tokens: list[int], logprobs: list[float], tops: list[tuple]
    ) -> None:
        """After the model ran: the scheduler's bookkeeping, each sampled token to its request, block events out."""
        self.scheduler.finish_step(scheduled)
        sampling = [item for item in scheduled if item.is_sampling]
        for item, token, logprob, top in zip(sampling, tokens, logprobs, tops, strict=True):
            self._emit_token(self._jobs[item.seq.arrival], token, logprob, top)
        self._tokens.add(len(tokens))
        events = self.block_manager.drain_events()  # always: undrained events would pile up without a publisher
        if events and self._on_block_events is not None:
            self._on_block_events(events)
        self.num_steps += 1

    def _emit_token(self, job: _Job, token: int, logprob: float, top: tuple) -> None:
        seq, params = job.seq, job.seq.request.sampling
        if params.max_tokens == 0:  # the prompt alone (completions' echo): the prefill's token is no answer
            if params.prompt_logprobs is not None:
                self._emit_prompt_scores(job)
            self._retire(job, "length")
            return
        seq.token_ids.append(token)
        if params.prompt_logprobs is not None and seq.num_output_tokens == 1:  # the prompt's scores, before it
            self._emit_prompt_scores(job)
        detok, constraint = job.detok, seq.constraint
        if constraint is not None and token not in job.stop_ids:
            constraint.consume(token)
        # The parser gave up, on the token or computing this step's mask (which then allowed end-of-sequence alone):
        # an answer that could not follow its schema is no answer, and never one that ended by itself (a review)
        if constraint is not None and (failed := constraint.failure()) is not None:
            self._fail(job, failed)
            return
        if token in job.stop_ids:
            text = detok.flush()
            self._retire(job, "stop", text, *detok.take())
            return
        text = detok.push(token, logprob, top if params.top_logprobs is not None else None)
        if constraint is not None and constraint.done:
            text, reason = text + detok.flush(), "stop"
        elif detok.is_stopped:
            reason = "stop"
        elif seq.num_output_tokens >= params.max_tokens:
            text += detok.flush()  # (which may end in a stop string: bytes of no character become U+FFFD)
            reason = "stop" if detok.is_stopped else "length"
        else:
            reason = None
        # Tokens leave with their text: those of a stop string, scored before it matched, never do.
        ids, logprobs, tops = detok.take()
        if reason is None:
            job.emit(GenerationChunk(ids, text, logprobs=logprobs, top_logprobs=tops))
        else:
            self._retire(job, reason, text, ids, logprobs, tops)

    @staticmethod
    def _emit_prompt_scores(job: _Job) -> None:
        seq = job.seq
        scores = seq.prompt_scores[: seq.num_prompt_tokens - 1]
        job.emit(GenerationChunk((), "", prompt_logprobs=tuple(lp for lp, _ in scores),
                                 prompt_top_logprobs=tuple(top for _, top in scores)))  # fmt: skip

    def _retire(
        self, job: _Job, reason: str, text: str = "", ids: tuple = (), logprobs: tuple = (), tops: tuple = ()
    ) -> None:
        seq = job.seq
        self.scheduler.finish(seq)
        del self._jobs[seq.arrival]
        waited = (seq.first_scheduled_s or time.monotonic()) - seq.submitted_s
        usage = Usage(seq.num_prompt_tokens, seq.num_output_tokens, seq.num_cached_tokens, waited)
        job.emit(GenerationChunk(ids, text, reason, usage, logprobs, tops))

    def _fail(self, job: _Job, exc: Exception) -> None:
        self.scheduler.finish(job.seq)
        del self._jobs[job.seq.arrival]
        job.emit(exc)

    def _fail_all(self, exc: Exception) -> None:
        for job in list(self._jobs.values()):
            self.scheduler.finish(job.seq)
            del self._jobs[job.seq.arrival]
            job.emit(exc)

"""Iteration-level scheduling: which sequences run in the next step, and how many tokens each.

Every step has a token budget. Running sequences go first, in rank order
(priority, then age): a decoding sequence takes one token, a sequence still
in prefill takes as much of its prompt as the budget leaves (chunked
prefill). When the KV pool cannot hold a running sequence's next tokens, the
lowest-ranked running sequence (lowest priority, then newest) is preempted:
its blocks are freed and it goes back to waiting, to be recomputed later
(its cached prefix blocks usually make that cheap). Waiting sequences are
admitted, best rank first, while the budget, the sequence limit and the pool
allow, and never in a step that had to preempt.
"""

import bisect
import time
from dataclasses import dataclass

from cloud_worker.engine.block_manager import BlockManager
from cloud_worker.engine.config import EngineConfig
from cloud_worker.engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int
    is_sampling: bool  # this step computes the sequence's last token, so its next token is sampled

    @classmethod
    def of(cls, seq: Sequence, num_new_tokens: int) -> "ScheduledSeq":
        return cls(seq, num_new_tokens, seq.num_computed_tokens + num_new_tokens == seq.num_tokens)


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager) -> None:
        """Reads the config's max_num_batched_tokens and max_num_seqs."""
        self.config = config
        self.block_manager = block_manager
        self.waiting: list[Sequence] = []  # sorted by rank
        self.running: list[Sequence] = []  # sorted by rank
        self.num_preemptions = 0
        self._watermark_blocks = max(1, block_manager.num_blocks // 100)

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        bisect.insort(self.waiting, seq, key=lambda s: s.rank)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> list[ScheduledSeq]:
        budget = self.config.max_num_batched_tokens
        scheduled: list[ScheduledSeq] = []
        preempted = False
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            num_new = min(seq.num_uncomputed_tokens, budget)
            while not self.block_manager.can_append_slots(seq, num_new):
                victim = self.running[-1]  # never one already scheduled: those rank before seq
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.status is SequenceStatus.RUNNING:
                self.block_manager.append_slots(seq, num_new)
                scheduled.append(ScheduledSeq.of(seq, num_new))
                budget -= num_new
                index += 1
        if not preempted:
            budget = self._admit(scheduled, budget)
        return scheduled

    def _admit(self, scheduled: list[ScheduledSeq], budget: int) -> int:
        bm = self.block_manager
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            # A prompt to score is computed whole: cached blocks would leave its positions without logits.
            cached = bm.match_prefix(seq) if seq.request.sampling.prompt_logprobs is None else []
            num_new = min(seq.num_tokens - len(cached) * bm.block_size_tokens, budget)
            # With others running, keep a little headroom so their next tokens do not force a preemption.
            headroom = self._watermark_blocks if self.running else 0
            if not bm.can_allocate(seq, cached, num_new, headroom):
                break
            self.waiting.pop(0)
            bm.allocate(seq, cached)
            bm.append_slots(seq, num_new)
            seq.status = SequenceStatus.RUNNING
            if seq.first_scheduled_s is None:  # a preempted sequence's queue wait ended at its first admission
                seq.first_scheduled_s = time.monotonic()
            bisect.insort(self.running, seq, key=lambda s: s.rank)
            scheduled.append(ScheduledSeq.of(seq, num_new))
            budget -= num_new
        return budget

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.block_manager.deallocate(seq)
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.add(seq)

    def finish_step(self, scheduled: list[ScheduledSeq]) -> None:
        """The step ran: its tokens are computed and their full blocks can be cached."""
        for item in scheduled:
            item.seq.num_computed_tokens += item.num_new_tokens
            self.block_manager.commit_computed(item.seq)

    def finish(self, seq: Sequence) -> None:
        """Remove a finished or cancelled sequence and free its blocks now."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.block_manager.deallocate(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED

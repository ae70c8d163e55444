"""One request's state inside the engine: its tokens, its blocks, how far it is computed."""

import itertools
import time
from dataclasses import dataclass, field
from enum import Enum

from proto.prefix_hash import block_hash, root_hash
from serving.engine_api import GenerationRequest
from serving.grammar import Constraint

_arrivals = itertools.count()


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request: GenerationRequest
    model_id: str
    block_size_tokens: int
    seed: int  # the request's seed, or one drawn at admission
    token_ids: list[int] = field(default_factory=list)  # prompt, then output
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    num_cached_tokens: int = 0  # prompt tokens the prefix cache served at the last admission
    block_table: list[int] = field(default_factory=list)
    num_committed_blocks: int = 0  # leading blocks already offered to the prefix cache
    status: SequenceStatus = SequenceStatus.WAITING
    arrival: int = field(default_factory=lambda: next(_arrivals))
    num_preemptions: int = 0
    submitted_s: float = field(default_factory=time.monotonic)
    first_scheduled_s: float | None = None  # for the queue-wait span
    constraint: Constraint | None = None  # the grammar the output follows, where the request has one
    # prompt_logprobs: (logprob of token p + 1, alternatives) for prompt positions p = 0, 1, ... computed so far
    prompt_scores: list[tuple[float, tuple]] = field(default_factory=list)
    _block_hashes: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.request.prompt_token_ids)
        self.num_prompt_tokens = len(self.request.prompt_token_ids)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def rank(self) -> tuple[int, int]:
        """Scheduling order: higher priority first, then older first."""
        return (-self.request.priority, self.arrival)

    def block_hashes(self) -> list[bytes]:
        """The chained prefix hash of every full block of token_ids (DESIGN.md section 3)."""
        size = self.block_size_tokens
        parent = self._block_hashes[-1] if self._block_hashes else root_hash(self.model_id, self.request.prefix_salt)
        for start in range(len(self._block_hashes) * size, self.num_tokens - size + 1, size):
            parent = block_hash(parent, self.token_ids[start : start + size])
            self._block_hashes.append(parent)
        return self._block_hashes

    def block_tokens(self, index: int) -> tuple[int, ...]:
        size = self.block_size_tokens
        return tuple(self.token_ids[index * size : (index + 1) * size])

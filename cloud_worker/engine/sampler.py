"""Batched next-token sampling on the logits' device, one set of parameters per row.

Semantics follow HF's warpers, as the serial engine's `sample_token`:
temperature, then top-k, then top-p (the smallest set whose probability
reaches top_p), then min-p (drop tokens below min_p times the top
probability). Rows with temperature 0 are greedy.

Randomness is counter-based: the uniform draw for token v of a row is a hash
of (seed, output index, v), so a seeded request gives the same tokens
whatever batch it runs in, after a preemption, or on another worker. The
draw is an exponential race (argmax of p / E with E ~ Exp(1)), which samples
exactly from p without a cumulative sum or a sort. `tandem_kernels/sampling.py`
holds both implementations: on CUDA a Triton kernel that finds the cut-offs
without sorting, elsewhere the torch reference (top-k by partial selection,
a sort only for rows asking for top-p). Both draw the same token for the
same seed.
"""

from dataclasses import dataclass

import torch

import tandem_kernels.sampling
from serving.engine_api import SamplingParams


@dataclass(frozen=True)
class SamplingBatch:
    temperature: torch.Tensor  # [S] float
    top_k: torch.Tensor  # [S] int64, 0 = off
    top_p: torch.Tensor  # [S] float, 1 = off
    min_p: torch.Tensor  # [S] float, 0 = off
    seed: torch.Tensor  # [S] int64
    step: torch.Tensor  # [S] int64: index of the token being sampled in the output
    all_greedy: bool

    @classmethod
    def build(cls, params: list[SamplingParams], seeds: list[int], steps: list[int], device) -> "SamplingBatch":
        def tensor(values, dtype):
            return torch.tensor(values, dtype=dtype, device=device)

        return cls(
            temperature=tensor([p.temperature for p in params], torch.float32),
            top_k=tensor([p.top_k for p in params], torch.int64),
            top_p=tensor([p.top_p for p in params], torch.float32),
            min_p=tensor([p.min_p for p in params], torch.float32),
            seed=tensor([s & ((1 << 63) - 1) for s in seeds], torch.int64),
            step=tensor(steps, torch.int64),
            all_greedy=all(p.is_greedy for p in params),
        )


def sample(
    logits: torch.Tensor, batch: SamplingBatch, raw: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [S, vocab] -> (token ids [S], log-probability of each chosen token under the raw logits [S]).

    `raw`: the logits before penalties and biases, when `logits` had any (default: `logits` themselves)."""
    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    tokens = greedy if batch.all_greedy else torch.where(batch.temperature == 0, greedy, _sample_random(logits, batch))
    raw = logits if raw is None else raw.float()
    logprobs = torch.log_softmax(raw, dim=-1).gather(1, tokens.unsqueeze(1)).squeeze(1)
    return tokens, logprobs


def _sample_random(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    b = batch
    return tandem_kernels.sampling.sample(logits, b.temperature, b.top_k, b.top_p, b.min_p, b.seed, b.step)


def masked_probs(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """The distribution each row samples from: temperature, top-k, top-p, min-p applied."""
    b = batch
    return tandem_kernels.sampling.masked_probs_ref(logits, b.temperature, b.top_k, b.top_p, b.min_p)

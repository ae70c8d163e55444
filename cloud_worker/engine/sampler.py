"""Batched next-token sampling on the logits' device, one set of parameters per row.

Semantics follow HF's warpers, as the serial engine's `sample_token`:
temperature, then top-k, then top-p (the smallest set whose probability
reaches top_p), then min-p (drop tokens below min_p times the top
probability). Rows with temperature 0 are greedy.

Randomness is counter-based: the uniform draw for token v of a row is a hash
of (seed, output index, v), so a seeded request gives the same tokens
whatever batch it runs in, after a preemption, or on another worker. The
draw is an exponential race (argmax of p / E with E ~ Exp(1)), which samples
exactly from p without a cumulative sum or a sort. Top-k uses a partial
selection (topk), and only rows asking for top-p are sorted.
"""

from dataclasses import dataclass

import torch

from tandem.engine_api import SamplingParams

_MASK32 = 0xFFFFFFFF


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


def sample(logits: torch.Tensor, batch: SamplingBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [S, vocab] -> (token ids [S], log-probability of each chosen token under the raw logits [S])."""
    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    tokens = greedy if batch.all_greedy else torch.where(batch.temperature == 0, greedy, _sample_random(logits, batch))
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, tokens.unsqueeze(1)).squeeze(1)
    return tokens, logprobs


def _sample_random(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    probs = masked_probs(logits, batch)
    exponential = -torch.log(uniforms(batch.seed, batch.step, logits.shape[1]))
    return (probs / exponential).argmax(dim=-1)


def masked_probs(logits: torch.Tensor, batch: SamplingBatch) -> torch.Tensor:
    """The distribution each row samples from: temperature, top-k, top-p, min-p applied."""
    temperature = torch.where(batch.temperature > 0, batch.temperature, torch.ones_like(batch.temperature))
    scaled = logits / temperature.unsqueeze(1)
    vocab = scaled.shape[1]
    top_k = torch.where((batch.top_k > 0) & (batch.top_k < vocab), batch.top_k, torch.zeros_like(batch.top_k))
    if bool((top_k > 0).any()):
        largest = torch.topk(scaled, int(top_k.max()), dim=-1).values
        kth = largest.gather(1, (top_k.clamp(min=1) - 1).unsqueeze(1))
        scaled = scaled.masked_fill((top_k > 0).unsqueeze(1) & (scaled < kth), float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    rows = (batch.top_p < 1).nonzero().squeeze(1)
    if rows.numel():
        probs[rows] = _top_p(probs[rows], batch.top_p[rows])
    if bool((batch.min_p > 0).any()):
        floor = batch.min_p.unsqueeze(1) * probs.max(dim=-1, keepdim=True).values
        probs = probs.masked_fill(probs < floor, 0.0)
    return probs


def _top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    # Drop a token when the mass before it already reaches top_p; the first always stays.
    drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= top_p.unsqueeze(1)
    return probs.masked_fill(drop_sorted.scatter(1, order, drop_sorted), 0.0)


def uniforms(seed: torch.Tensor, step: torch.Tensor, vocab: int) -> torch.Tensor:
    """[S, vocab] uniforms in (0, 1), a pure function of (seed, step, token id)."""
    row = _hash32(_hash32(_hash32(seed & _MASK32) ^ (seed >> 32)) ^ (step & _MASK32))
    token = torch.arange(vocab, device=seed.device, dtype=torch.int64) * 0x9E3779B1 & _MASK32
    bits = _hash32(_hash32(row.unsqueeze(1) ^ token))
    return (bits.double() + 0.5) / 2.0**32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (values < 2**32 held in int64, so products never overflow)."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    return (x >> 16) ^ x

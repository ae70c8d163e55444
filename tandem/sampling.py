"""Next-token sampling: greedy, temperature, top-k, top-p, per-request seed.

One row of logits at a time for now; the batched on-device sampler is the
engine issue's. Semantics follow HF's warpers: temperature, then top-k, then
top-p (keep the smallest set whose probability reaches top_p), then
min-p (drop tokens below min_p times the top probability).
"""

import torch

from tandem.engine_api import SamplingParams


class SamplingError(RuntimeError):
    """The model's probabilities are not a distribution (NaN, inf, or all zero): the backend's fault."""


def make_generator(params: SamplingParams) -> torch.Generator | None:
    if params.is_greedy:
        return None
    gen = torch.Generator()
    if params.seed is None:
        gen.seed()
    else:
        gen.manual_seed(params.seed)
    return gen


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """logits: [vocab] float tensor; returns the chosen token id."""
    if params.is_greedy:
        return int(torch.argmax(logits))
    scaled = logits.float() / params.temperature
    if 0 < params.top_k < scaled.numel():
        kth = torch.topk(scaled, params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the mass before it already reaches top_p; the first always stays.
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= params.top_p
        drop_sorted[0] = False  # even when top_p rounds to 0 in float32 (a subnormal top_p)
        scaled = scaled.masked_fill(drop_sorted.scatter(0, order, drop_sorted), float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if params.min_p > 0:
        probs = probs.masked_fill(probs < params.min_p * probs.max(), 0.0)
    if not bool(torch.isfinite(probs).all()) or float(probs.sum()) <= 0:
        raise SamplingError("the model's next-token probabilities are not finite; refusing to sample from them")
    return int(torch.multinomial(probs, 1, generator=generator))

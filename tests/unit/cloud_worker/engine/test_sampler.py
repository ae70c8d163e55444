"""Batched sampler: greedy rows, seeds, and masks that hold statistically."""

import pytest
import torch

from cloud_worker.engine.sampler import SamplingBatch, masked_probs, sample
from serving.engine_api import SamplingParams

VOCAB = 64


def logits(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(seed)) * 2


def batch(params: list[SamplingParams], seeds: list[int], step: int = 0) -> SamplingBatch:
    return SamplingBatch.build(params, seeds, [step] * len(params), "cpu")


def test_greedy_rows_take_the_argmax_next_to_sampled_rows():
    x = logits(3)
    params = [SamplingParams(), SamplingParams(temperature=1.0), SamplingParams()]
    tokens, logprobs = sample(x, batch(params, [1, 2, 3]))
    assert tokens[0] == x[0].argmax() and tokens[2] == x[2].argmax()
    assert torch.allclose(logprobs, torch.log_softmax(x, -1).gather(1, tokens[:, None]).squeeze(1))


def test_a_seed_gives_the_same_tokens_whatever_the_batch():
    x = logits(1)
    p = SamplingParams(temperature=1.0, seed=42)
    alone = [int(sample(x, batch([p], [42], step))[0]) for step in range(20)]
    again = [int(sample(x, batch([p], [42], step))[0]) for step in range(20)]
    neighbours = torch.cat([logits(3, seed=9), x])
    in_batch = [int(sample(neighbours, batch([p] * 4, [7, 8, 9, 42], step))[0][3]) for step in range(20)]
    assert alone == again == in_batch
    other_seed = [int(sample(x, batch([p], [43], step))[0]) for step in range(20)]
    assert other_seed != alone


MASKS = {
    "top-k 5": SamplingParams(temperature=1.0, top_k=5),
    "top-p 0.5": SamplingParams(temperature=1.0, top_p=0.5),
    "min-p 0.2": SamplingParams(temperature=1.0, min_p=0.2),
    "all three": SamplingParams(temperature=0.7, top_k=10, top_p=0.8, min_p=0.05),
}


def reference_allowed(row: torch.Tensor, p: SamplingParams) -> set[int]:
    """The allowed set, computed one row at a time from sorted probabilities."""
    scaled = row / p.temperature
    order = scaled.argsort(descending=True).tolist()
    keep = order[: p.top_k] if p.top_k else order
    probs = torch.softmax(scaled[keep], -1).tolist()
    kept, mass = [], 0.0
    for token, prob in zip(keep, probs, strict=True):
        if mass >= p.top_p:
            break
        kept.append((token, prob))
        mass += prob
    top = kept[0][1]
    return {t for t, prob in kept if prob >= p.min_p * top}


@pytest.mark.parametrize("name", sorted(MASKS))
def test_masks_never_emit_a_token_outside_and_sample_the_renormalised_distribution(name):
    p = MASKS[name]
    x = logits(1, seed=3)
    allowed = reference_allowed(x[0], p)
    draws = 4000
    rows = x.expand(draws, VOCAB)
    tokens, _ = sample(rows, SamplingBatch.build([p] * draws, list(range(draws)), [0] * draws, "cpu"))
    assert set(tokens.tolist()) <= allowed
    expected = masked_probs(x, batch([p], [0]))[0]
    expected = expected / expected.sum()
    assert {i for i in range(VOCAB) if expected[i] > 0} == allowed
    observed = torch.bincount(tokens, minlength=VOCAB).double() / draws
    # Every allowed token's frequency within 5 standard errors of its probability.
    stderr = (expected * (1 - expected) / draws).sqrt().double()
    assert ((observed - expected.double()).abs() <= 5 * stderr + 1e-9).all()

"""The Triton sampling kernel (no sort) against the sort-based reference, through Triton's interpreter.

Both draw with the same counter hash, so for a given (seed, step) they must pick the same token: that
checks the top-k, top-p and min-p cut-offs exactly (a token outside the reference's mask could not be
chosen, and one the kernel wrongly dropped would change the argmax). The sampled distribution is then
checked statistically against the reference's masked probabilities.
"""

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported (kernels import it lazily)
pytest.importorskip("triton")

from tandem_kernels.sampling import masked_probs_ref, sample_ref, sample_triton  # noqa: E402


def params(rows: int, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0):
    return dict(
        temperature=torch.full((rows,), temperature),
        top_k=torch.full((rows,), top_k, dtype=torch.int64),
        top_p=torch.full((rows,), top_p),
        min_p=torch.full((rows,), min_p),
        seed=torch.arange(seed, seed + rows, dtype=torch.int64) * 7919 + (1 << 40),
        step=torch.arange(rows, dtype=torch.int64),
    )


@pytest.mark.parametrize(
    "setting",
    [
        dict(),
        dict(temperature=0.7, top_k=5),
        dict(top_p=0.8),
        dict(top_k=40, top_p=0.9, temperature=1.3),
        dict(min_p=0.1),
        dict(top_k=1),  # greedy through the sampling path
        dict(top_p=0.0),  # only the most likely token reaches any mass: it alone stays
    ],
    ids=["plain", "top_k", "top_p", "k+p+temperature", "min_p", "k=1", "p=0"],
)
def test_the_kernel_draws_what_the_reference_draws(setting):
    rows, vocab = 6, 300  # vocab > the block below: every pass spans several chunks, the last one ragged
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(3)) * 3
    p = params(rows, **setting)
    expected = sample_ref(logits, **p)
    got = sample_triton(logits, **p, block=128)
    assert got.tolist() == expected.tolist()
    kept = masked_probs_ref(logits, p["temperature"], p["top_k"], p["top_p"], p["min_p"]) > 0
    assert bool(kept.gather(1, got.unsqueeze(1)).all())  # never a token outside the mask


def test_mixed_parameters_per_row():
    rows, vocab = 6, 200
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(4)) * 2
    p = params(rows)
    p["top_k"] = torch.tensor([0, 3, 0, 50, 1, 0])
    p["top_p"] = torch.tensor([1.0, 1.0, 0.5, 0.9, 1.0, 0.95])
    p["min_p"] = torch.tensor([0.0, 0.0, 0.0, 0.05, 0.0, 0.2])
    p["temperature"] = torch.tensor([1.0, 0.5, 2.0, 1.0, 1.0, 0.8])
    assert sample_triton(logits, **p, block=64).tolist() == sample_ref(logits, **p).tolist()


def test_tokens_tied_at_the_top_p_cut_are_all_kept_by_both():
    """Three tokens tie at the boundary (bf16 logits tie often): top-p 0.5 reaches its mass inside the tie, and all
    three stay, whatever order a sort leaves them in. The CPU reference and the GPU kernel then draw alike, as a
    seeded request must on either device (the reference kept only those a sort put first, and they differed)."""
    logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, 0.0, 0.0, -1.0, 0.0]] * 8)
    p = params(8, top_p=0.5)
    probs = masked_probs_ref(logits, p["temperature"], p["top_k"], p["top_p"], p["min_p"])
    assert (probs[0, :4] > 0).all() and (probs[0, 4:] == 0).all()  # token 0 (0.44) and all three tied at 0.16
    rows, vocab = 12, 320
    tied = torch.randint(-3, 4, (rows, vocab), generator=torch.Generator().manual_seed(5)).float()
    for top_p in (0.3, 0.7, 0.95):
        q = params(rows, top_p=top_p, top_k=0, seed=int(top_p * 100))
        assert sample_triton(tied, **q, block=128).tolist() == sample_ref(tied, **q).tolist()


def test_the_sampled_distribution_is_the_masked_one():
    """8 tokens, min-p 0.15 keeps 4 (a mask without the bisection passes; the cut-offs are checked exactly above):
    400 draws, one per step, against the renormalised kept mass. The interpreter runs a program a row, slowly, so
    the kernel draws the first 50 steps and must draw what the reference draws there, and the reference (the
    same counter hash) draws all 400."""
    vocab, draws, by_kernel = 8, 400, 50
    row = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0]])
    p = params(draws, min_p=0.15)
    p["seed"] = torch.full((draws,), 12345, dtype=torch.int64)  # one request, successive steps
    tokens = sample_ref(row.expand(draws, vocab).contiguous(), **p)
    first = {k: v[:by_kernel] for k, v in p.items()}
    assert (
        sample_triton(row.expand(by_kernel, vocab).contiguous(), **first, block=8).tolist()
        == tokens[:by_kernel].tolist()
    )
    probs = masked_probs_ref(row, p["temperature"][:1], p["top_k"][:1], p["top_p"][:1], p["min_p"][:1])[0]
    counts = torch.bincount(tokens, minlength=vocab).double()
    kept = probs > 0
    assert kept.sum() == 4 and counts[~kept].sum() == 0  # masked tokens are never drawn
    expected = probs.double() / probs.sum() * draws
    chi2 = (((counts - expected) ** 2) / expected)[kept].sum().item()
    assert chi2 < 16.3, (counts.tolist(), expected.tolist())  # the 99.9th percentile of chi-square, 3 dof


def test_the_launcher_refuses_bad_arguments():
    logits = torch.randn(2, 10)
    p = params(2)
    with pytest.raises(ValueError, match="top_k"):
        sample_triton(logits, **(p | {"top_k": p["top_k"].int()}))
    with pytest.raises(ValueError, match="rows, vocab"):
        sample_triton(logits.t(), **p)

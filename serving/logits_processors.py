"""Penalties, biases and grammar masks on next-token logits, batched, one set of parameters per row; both engines
call it.

Applied to the raw logits before temperature, top-k, top-p and min-p (and before greedy's argmax), in
this order:
- `logit_bias` (OpenAI; (token, bias) pairs): the bias is added to the token's logit (-100 bans it, +100 all but forces it);
- `repetition_penalty` (HF's `RepetitionPenaltyLogitsProcessor`, vLLM's): every token already in the prompt
  or the output has its logit divided by the penalty where positive, multiplied where negative; 1 is off;
- `presence_penalty` and `frequency_penalty` (OpenAI): a token the output already holds `count` times has
  `frequency_penalty * count + presence_penalty` subtracted; the prompt does not count.
A batch where no row asks for any of them is returned as it came, with no work. The log-probabilities the
engines report stay those of the raw logits, as vLLM reports them by default.
"""

from collections.abc import Sequence

import torch

from serving.engine_api import SamplingParams
from serving.grammar import Constraint


def wants_processing(params: SamplingParams) -> bool:
    return bool(
        params.logit_bias
        or params.repetition_penalty != 1.0
        or params.presence_penalty != 0.0
        or params.frequency_penalty != 0.0
    )


def apply_penalties(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    prompt_ids: Sequence[Sequence[int]],
    output_ids: Sequence[Sequence[int]],
) -> torch.Tensor:
    """logits [S, vocab] (float) -> the processed logits (a new tensor where any row asks for processing)."""
    rows = [i for i, p in enumerate(params) if wants_processing(p)]
    if not rows:
        return logits
    logits = logits.clone()
    vocab, device = logits.shape[1], logits.device
    sub = torch.tensor(rows, device=device)
    picked = logits[sub]
    chosen = [params[i] for i in rows]

    if any(p.logit_bias for p in chosen):
        ids, real = _padded([[token for token, _ in p.logit_bias] for p in chosen], vocab, device)
        bias = torch.tensor(
            [[*(b for _, b in p.logit_bias), *[0.0] * (ids.shape[1] - len(p.logit_bias))] for p in chosen],
            dtype=picked.dtype,
            device=device,
        )
        picked = _with_extra_column(picked).scatter_add(1, ids, bias * real.to(picked.dtype))[:, :vocab]

    if any(p.repetition_penalty != 1.0 for p in chosen):
        ids, real = _padded([[*prompt_ids[i], *output_ids[i]] for i in rows], vocab, device)
        seen = _with_extra_column(torch.zeros_like(picked)).scatter(1, ids, real.to(picked.dtype))[:, :vocab] > 0
        penalty = torch.tensor([p.repetition_penalty for p in chosen], dtype=picked.dtype, device=device)[:, None]
        penalized = torch.where(picked > 0, picked / penalty, picked * penalty)
        picked = torch.where(seen, penalized, picked)

    if any(p.presence_penalty != 0.0 or p.frequency_penalty != 0.0 for p in chosen):
        ids, real = _padded([list(output_ids[i]) for i in rows], vocab, device)
        counts = _with_extra_column(torch.zeros_like(picked)).scatter_add(1, ids, real.to(picked.dtype))[:, :vocab]
        frequency = torch.tensor([p.frequency_penalty for p in chosen], dtype=picked.dtype, device=device)[:, None]
        presence = torch.tensor([p.presence_penalty for p in chosen], dtype=picked.dtype, device=device)[:, None]
        picked = picked - frequency * counts - presence * (counts > 0).to(picked.dtype)

    logits[sub] = picked
    return logits


def score(logits: torch.Tensor, targets: list[int], alternatives: list[int | None]) -> tuple[list[float], list[tuple]]:
    """Per row of logits [R, vocab]: the log-probability of `targets[row]`, and the `alternatives[row]` most likely
    (token, log-probability) pairs (() where None or 0). One log-softmax for the batch. Both engines report an
    answer's tokens and score a prompt's (each prompt position scores the next prompt token) with it."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(1, torch.tensor(targets, device=logits.device).unsqueeze(1)).squeeze(1).tolist()
    widest = max((k or 0 for k in alternatives), default=0)
    if not widest:
        return chosen, [()] * len(targets)
    values, ids = logprobs.topk(widest, dim=-1)
    tops = [
        tuple(zip(row_ids[:k], row_values[:k], strict=True)) if k else ()
        for k, row_ids, row_values in zip(alternatives, ids.tolist(), values.tolist(), strict=True)
    ]
    return chosen, tops


def _padded(id_lists: list[list[int]], vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, L] ids padded with `vocab` (a column dropped afterwards; so is any id outside the vocabulary), and
    [R, L] ones where an entry is real."""
    width = max(1, max(len(ids) for ids in id_lists))
    ids = torch.full((len(id_lists), width), vocab, dtype=torch.int64)
    for row, row_ids in enumerate(id_lists):
        if row_ids:
            ids[row, : len(row_ids)] = torch.tensor(row_ids, dtype=torch.int64)
    ids = torch.where((ids >= 0) & (ids < vocab), ids, vocab).to(device)
    return ids, (ids < vocab).to(torch.float32)


def _with_extra_column(t: torch.Tensor) -> torch.Tensor:
    return torch.cat([t, t.new_zeros(t.shape[0], 1)], dim=1)


def mask_logits(logits: torch.Tensor, constraints: Sequence[Constraint | None]) -> torch.Tensor:
    """logits [S, vocab]: rows with a constraint keep only the tokens it allows, unpacked and applied for all rows at
    once; ids beyond the tokenizer's vocabulary (a model's padded rows) are never allowed."""
    rows = [i for i, c in enumerate(constraints) if c is not None]
    if not rows:
        return logits
    vocab = logits.shape[1]
    words = torch.frombuffer(bytearray(b"".join(constraints[row].bitmask() for row in rows)), dtype=torch.int32)
    words = words.view(len(rows), -1)
    refused = ((words[:, :, None] >> torch.arange(32, dtype=torch.int32)) & 1).view(len(rows), -1) == 0
    width = min(vocab, refused.shape[1])
    out = logits.clone()
    if len(rows) == logits.shape[0]:  # every row constrained (the common batch): in place, no gather
        target = out
    else:
        target = out[rows]
    target[:, width:] = float("-inf")
    target[:, :width].masked_fill_(refused[:, :width].to(logits.device), float("-inf"))
    if target is not out:
        out[rows] = target
    return out

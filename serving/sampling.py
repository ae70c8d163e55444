"""Next-token sampling for one sequence at a time (the serial engine, on the edge).

The same sampler the paged engine runs in batches (`tandem_kernels/sampling.py`,
through `cloud_worker/engine/sampler.py`): HF's warpers in order
(temperature, top-k, top-p, min-p), then a counter-based draw whose
randomness is a hash of (seed, output index, token id). So the same seed
and the same logits give the same token on the edge and in the cloud, in
any batch, after any restart.
"""

import random

import torch

import tandem_kernels.sampling
from serving.engine_api import SamplingParams

_SEED_MASK = (1 << 63) - 1


class SamplingError(RuntimeError):
    """The model's probabilities are not a distribution (NaN, inf, or all masked): the backend's fault."""


def request_seed(params: SamplingParams) -> int:
    """The request's seed, or one drawn for it (as the paged engine draws one at admission)."""
    return params.seed if params.seed is not None else random.getrandbits(63)


def sample_token(logits: torch.Tensor, params: SamplingParams, seed: int, step: int) -> int:
    """logits: [vocab]; step: the index of this token in the answer. Returns the chosen token id."""
    top = logits.max()
    if not params.is_greedy:
        top = top.float() / params.temperature  # finite logits can overflow once divided by a small temperature
    if not bool(torch.isfinite(top)):  # NaN anywhere, +inf, every token masked to -inf, or that overflow
        raise SamplingError("the model's next-token probabilities are not finite; refusing to sample from them")
    if params.is_greedy:
        return int(torch.argmax(logits))

    def one(value, dtype) -> torch.Tensor:
        return torch.tensor([value], dtype=dtype, device=logits.device)

    token = tandem_kernels.sampling.sample(
        logits.float().unsqueeze(0),
        one(params.temperature, torch.float32),
        one(params.top_k, torch.int64),
        one(params.top_p, torch.float32),
        one(params.min_p, torch.float32),
        one(seed & _SEED_MASK, torch.int64),
        one(step, torch.int64),
    )
    return int(token[0])

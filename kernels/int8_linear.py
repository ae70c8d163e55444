"""Weight-only INT8 matmul: y = (x @ W_q^T) * scale (+ bias), W_q int8 [out, in], scale [out] per output channel."""

import torch


def int8_linear_ref(
    x: torch.Tensor, weight_q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    assert weight_q.dtype == torch.int8 and scale.shape == (weight_q.shape[0],)
    out = torch.nn.functional.linear(x, weight_q.to(x.dtype)) * scale.to(x.dtype)
    return out if bias is None else out + bias


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel INT8: W ~= W_q * scale[:, None]."""
    scale = weight.abs().amax(dim=1).float().clamp(min=1e-8) / 127.0
    weight_q = torch.round(weight.float() / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return weight_q, scale


def int8_linear(x, weight_q, scale, bias=None):
    return int8_linear_ref(x, weight_q, scale, bias)

"""Rotary position embedding (non-interleaved halves, as HF Llama), with the
config's rope scaling: none, "linear", or "llama3"."""

import math
from typing import Any

import torch
from torch import nn

from modeling.model_config import UnsupportedModelError


def inverse_frequencies(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type")
    if kind in (None, "default"):
        return inv_freq
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        return _llama3_frequencies(inv_freq, scaling)
    raise UnsupportedModelError(f"rope_scaling type {kind!r} not supported (default, linear, llama3)")


def _llama3_frequencies(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_context / low, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_context / high) & (wavelen <= old_context / low)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, theta: float, scaling: dict[str, Any] | None) -> None:
        super().__init__()
        self.register_buffer("inv_freq", inverse_frequencies(head_dim, theta, scaling), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of shape [batch, tokens, head_dim] for integer positions [batch, tokens]."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos(), angles.sin()

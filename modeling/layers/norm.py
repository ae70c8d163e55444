import torch
from torch import nn

from tandem_kernels.rms_norm import rms_norm


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32, as HF does, then cast back before the weight (tandem_kernels/rms_norm.py).
        return rms_norm(x, self.weight, self.eps)[0]

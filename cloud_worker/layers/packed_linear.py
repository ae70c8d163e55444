"""CPU linears through oneDNN with weights packed once, a transform applied after the model is built.

`nn.Linear` on a CPU tensor runs the BLAS sgemm torch was built with (MKL on
x86), which repacks the weight on every call and, on AMD CPUs, takes MKL's
AVX2 path. oneDNN's linear with a weight reordered once into its blocked
layout (what torch.compile's CPU backend does when it freezes weights) uses
the machine's widest vector unit and skips the repacking. Same fp32
arithmetic, different summation order: results agree with `nn.Linear` to
fp32 rounding. On the bench's 2-vCPU AMD EPYC (AVX-512) the decoder's matmuls
take 2.1x (512 rows) to 2.8x (64 rows) less time; bench/engine_throughput.py
measures the engine with and without this transform.

`pack_linears` checks one packed layer against `nn.Linear` before replacing
anything and leaves the model alone where oneDNN is missing or disagrees.
`--cpu-linear aten` (EngineConfig.cpu_linear) turns it off.
"""

import logging

import torch
from torch import nn

log = logging.getLogger(__name__)

AGREE_RTOL = 1e-4  # of the output's largest magnitude; fp32 reordering error is ~1e-6


class PackedLinear(nn.Module):
    """y = x W^T + b with W held in oneDNN's packed layout (not a state-dict module: build, then pack)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def onednn_linear_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _agrees(linear: nn.Linear) -> bool:
    """One packed layer against nn.Linear on a random input: the guard against a platform where it is wrong."""
    x = torch.randn(5, linear.in_features, generator=torch.Generator().manual_seed(0), dtype=linear.weight.dtype)
    expected = linear(x)
    got = PackedLinear(linear)(x)
    return bool((got - expected).abs().max() <= AGREE_RTOL * expected.abs().max().clamp_min(1e-30))


@torch.no_grad()
def pack_linears(model: nn.Module) -> int:
    """Replace every CPU fp32/bf16 `nn.Linear` in `model` by a PackedLinear; returns how many were packed."""
    linears = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear)
        and child.weight.device.type == "cpu"
        and child.weight.dtype in (torch.float32, torch.bfloat16)
    ]
    if not linears:
        return 0
    if not onednn_linear_available():
        log.info("CPU linears: torch's BLAS (this torch has no oneDNN linear)")
        return 0
    if not _agrees(linears[0][2]):
        log.warning("CPU linears: torch's BLAS (oneDNN's packed linear disagreed with nn.Linear on this machine)")
        return 0
    for parent, name, child in linears:
        setattr(parent, name, PackedLinear(child))
    log.info("CPU linears: oneDNN with packed weights (%d layers)", len(linears))
    return len(linears)

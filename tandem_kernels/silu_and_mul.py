"""SiLU-and-multiply, the Llama MLP's gate: silu(gate) * up, elementwise."""

import functools

import torch

from tandem_kernels import cpu_extension
from tandem_kernels.dispatch import check, use_triton

BLOCK = 1024


def silu_and_mul_ref(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def silu_and_mul_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        gate = tl.load(gate_ptr + offs, mask=mask).to(tl.float32)
        up = tl.load(up_ptr + offs, mask=mask).to(tl.float32)
        out = gate / (1.0 + tl.exp(-gate)) * up
        tl.store(out_ptr + offs, out.to(out_ptr.dtype.element_ty), mask=mask)

    return silu_and_mul_kernel


def silu_and_mul_triton(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    check(gate.shape == up.shape, f"gate {tuple(gate.shape)} and up {tuple(up.shape)} must have one shape")
    check(gate.dtype == up.dtype, f"gate {gate.dtype} and up {up.dtype} must have one dtype")
    check(gate.is_contiguous() and up.is_contiguous(), "gate and up must be contiguous")
    out = torch.empty_like(gate)
    n = gate.numel()
    _kernel()[((n + BLOCK - 1) // BLOCK,)](gate, up, out, n, BLOCK=BLOCK)
    return out


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if use_triton(gate):
        return silu_and_mul_triton(gate, up)
    ext = cpu_extension.usable_for(gate, up)
    if ext is not None and gate.is_contiguous() and up.is_contiguous() and gate.shape == up.shape:
        return ext.silu_and_mul(gate, up)  # one pass (tandem_kernels/csrc/cpu_kernels.cpp)
    return silu_and_mul_ref(gate, up)

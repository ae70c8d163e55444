"""RMSNorm with the residual add fused in: h = x + residual; out = h / rms(h) * weight.

Normalisation is in fp32 and cast back before the weight, as HF does. Returns
(out, h) so the next layer gets h as its residual without a separate add.
"""

import functools

import torch

from tandem_kernels import cpu_extension
from tandem_kernels.dispatch import check, use_triton


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    h = x if residual is None else x + residual
    h32 = h.float()
    normed = (h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype)
    return weight * normed, h


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, h_ptr, hidden, eps, HAS_RES: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < hidden
        h = tl.load(x_ptr + row * hidden + offs, mask=mask, other=0.0)
        if HAS_RES:
            h = h + tl.load(res_ptr + row * hidden + offs, mask=mask, other=0.0)
            tl.store(h_ptr + row * hidden + offs, h, mask=mask)
        h32 = h.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(h32 * h32, axis=0) / hidden + eps)
        normed = (h32 * rstd).to(x_ptr.dtype.element_ty)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + row * hidden + offs, w * normed, mask=mask)

    return rms_norm_kernel


def rms_norm_triton(x, weight, eps, residual=None):
    import triton

    hidden = x.shape[-1]
    check(weight.shape == (hidden,), f"weight {tuple(weight.shape)} must be ({hidden},)")
    check(x.is_contiguous() and (residual is None or residual.is_contiguous()), "x and residual must be contiguous")
    check(residual is None or residual.shape == x.shape, "residual must have x's shape")
    out = torch.empty_like(x)
    h = torch.empty_like(x) if residual is not None else x
    rows = x.numel() // hidden
    _kernel()[(rows,)](x, residual if residual is not None else x, weight, out, h, hidden, eps,
                       HAS_RES=residual is not None, BLOCK=triton.next_power_of_2(hidden))  # fmt: skip
    return out, h


def rms_norm(x, weight, eps, residual=None):
    if use_triton(x):
        return rms_norm_triton(x, weight, eps, residual)
    ext = cpu_extension.usable_for(x, weight, *(() if residual is None else (residual,)))
    if ext is not None and x.is_contiguous() and (residual is None or residual.is_contiguous()):
        return ext.rms_norm(x, residual, weight, eps)  # one pass (tandem_kernels/csrc/cpu_kernels.cpp)
    return rms_norm_ref(x, weight, eps, residual)

"""Rotary position embedding, applied: x * cos + rotate_half(x) * sin (HF Llama's non-interleaved halves).

cos and sin come from the layer (`modeling/layers/rotary.py`), where the
config's scaling (linear, llama3) is folded into the frequencies, so one kernel
serves every scaling.
"""

import functools

import torch

from tandem_kernels import cpu_extension
from tandem_kernels.dispatch import check, triton_refuses, use_triton


def apply_rotary_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [batch, heads, tokens, head_dim]; cos/sin: [batch, tokens, head_dim]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    cos, sin = cos.unsqueeze(1).to(x.dtype), sin.unsqueeze(1).to(x.dtype)
    return x * cos + rotated * sin


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def rotary_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, heads, tokens, HALF: tl.constexpr):
        row = tl.program_id(0)  # one (batch, head, token) row of x
        token = row % tokens
        batch = row // (heads * tokens)
        dims = tl.arange(0, HALF)
        base = row * 2 * HALF
        angle_base = (batch * tokens + token) * 2 * HALF
        x1 = tl.load(x_ptr + base + dims).to(tl.float32)
        x2 = tl.load(x_ptr + base + HALF + dims).to(tl.float32)
        cos = tl.load(cos_ptr + angle_base + dims).to(tl.float32)
        sin = tl.load(sin_ptr + angle_base + dims).to(tl.float32)
        dtype = out_ptr.dtype.element_ty
        tl.store(out_ptr + base + dims, (x1 * cos - x2 * sin).to(dtype))
        tl.store(out_ptr + base + HALF + dims, (x2 * cos + x1 * sin).to(dtype))

    return rotary_kernel


def apply_rotary_triton(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    batch, heads, tokens, head_dim = x.shape
    check(cos.shape == sin.shape == (batch, tokens, head_dim), f"cos/sin must be {(batch, tokens, head_dim)}")
    check(head_dim % 2 == 0 and (head_dim // 2) & (head_dim // 2 - 1) == 0, "head_dim/2 must be a power of 2")
    x = x.contiguous()  # q/k arrive transposed from the projection; one copy, as the reference's cat makes
    cos, sin = cos.contiguous(), sin.contiguous()
    out = torch.empty_like(x)
    _kernel()[(batch * heads * tokens,)](x, cos, sin, out, heads, tokens, HALF=head_dim // 2)
    return out


def apply_rotary(x, cos, sin):
    if use_triton(x) and x.shape[-1] % 2 == 0 and triton_refuses(x.shape[-1] // 2, 16) is None:
        return apply_rotary_triton(x, cos, sin)
    ext = cpu_extension.usable_for(x, cos, sin)
    tokens_first = x.transpose(1, 2)  # [batch, tokens, heads, d]: contiguous when x is a projection's output
    if ext is not None and tokens_first.is_contiguous() and cos.is_contiguous() and sin.is_contiguous():
        return ext.rotary(tokens_first, cos, sin).transpose(1, 2)  # one pass (tandem_kernels/csrc/cpu_kernels.cpp)
    return apply_rotary_ref(x, cos, sin)

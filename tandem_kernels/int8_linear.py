"""Weight-only INT8 matmul: y = (x @ W_q^T) * scale (+ bias), W_q int8 [out, in], scale [out] per output channel.

The Triton kernel reads the INT8 weights (half the bytes of bf16), converts
each tile to the activations' dtype in registers, and accumulates in fp32:
decode-time linears are weight-bandwidth bound, so fewer weight bytes is the
speed-up. The per-channel scale and the bias are applied once, to the output tile.
"""

import functools

import torch

from tandem_kernels.dispatch import check, use_triton


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


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def int8_linear_kernel(
        x_ptr, w_ptr, scale_ptr, bias_ptr, out_ptr, M, N, K,
        stride_xm, stride_wn, stride_om,
        HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    ):  # fmt: skip
        """One program per [BLOCK_M, BLOCK_N] output tile, walking K in BLOCK_K steps."""
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k_valid = k0 + ks < K
            x = tl.load(x_ptr + rows[:, None] * stride_xm + (k0 + ks)[None, :],
                        mask=(rows[:, None] < M) & k_valid[None, :], other=0.0)  # fmt: skip
            w = tl.load(  # [BLOCK_K, BLOCK_N], the weight read transposed
                w_ptr + cols[None, :] * stride_wn + (k0 + ks)[:, None],
                mask=(cols[None, :] < N) & k_valid[:, None],
                other=0,
            )
            acc += tl.dot(x, w.to(x.dtype))
        acc = acc * tl.load(scale_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        if HAS_BIAS:
            acc += tl.load(bias_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=(rows[:, None] < M) & (cols[None, :] < N))  # fmt: skip

    return int8_linear_kernel


def int8_linear_triton(x, weight_q, scale, bias=None, block_n: int = 64, block_k: int = 64):
    n, k = weight_q.shape
    check(weight_q.dtype == torch.int8 and weight_q.is_contiguous(), "weight_q: contiguous int8 [out, in]")
    check(x.shape[-1] == k, f"x has {x.shape[-1]} input features, the weight {k}")
    check(scale.shape == (n,) and scale.is_floating_point(), f"scale: [{n}] floating point")
    check(bias is None or bias.shape == (n,), f"bias: [{n}]")
    check(x.dtype in (torch.float32, torch.float16, torch.bfloat16), f"x dtype {x.dtype}")
    x2 = x.reshape(-1, k)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    out = torch.empty(m, n, device=x.device, dtype=x.dtype)
    block_m = 16 if m <= 16 else 64  # decode batches are short: do not compute 64 rows of padding
    grid = (-(-m // block_m), -(-n // block_n))
    _kernel()[grid](
        x2, weight_q, scale, bias if bias is not None else scale, out, m, n, k,
        x2.stride(0), weight_q.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
    )  # fmt: skip
    return out.view(*x.shape[:-1], n)


def int8_linear(x, weight_q, scale, bias=None):
    if use_triton(x):
        return int8_linear_triton(x, weight_q, scale, bias)
    return int8_linear_ref(x, weight_q, scale, bias)

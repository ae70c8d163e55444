"""Write a step's new K/V into the paged cache: token t goes to slot slots[t]
(block slots[t] // block_size, offset slots[t] % block_size) of every KV head.
Cache layout as in paged_attention.py: [kv_heads, num_blocks, block_size, head_dim].
"""

import functools

import torch

from tandem_kernels.dispatch import check, triton_refuses, use_triton


def write_kv_ref(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor):
    """k, v: [T, kv_heads, head_dim] written to the cache slots [T]."""
    kv_heads, _, _, head_dim = k_cache.shape
    k_cache.view(kv_heads, -1, head_dim).index_copy_(1, slots, k.transpose(0, 1).to(k_cache.dtype))
    v_cache.view(kv_heads, -1, head_dim).index_copy_(1, slots, v.transpose(0, 1).to(v_cache.dtype))


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def kv_write_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slots_ptr, stride_token, stride_head,
                        stride_cache_head, HEAD_DIM: tl.constexpr):  # fmt: skip
        token, head = tl.program_id(0), tl.program_id(1)
        dims = tl.arange(0, HEAD_DIM)
        slot = tl.load(slots_ptr + token)
        src = token * stride_token + head * stride_head + dims
        dst = head * stride_cache_head + slot * HEAD_DIM + dims
        tl.store(k_cache_ptr + dst, tl.load(k_ptr + src).to(k_cache_ptr.dtype.element_ty))
        tl.store(v_cache_ptr + dst, tl.load(v_ptr + src).to(v_cache_ptr.dtype.element_ty))

    return kv_write_kernel


def write_kv_triton(k_cache, v_cache, k, v, slots):
    kv_heads, _, _, head_dim = k_cache.shape
    check(k.shape == v.shape and k.shape[1:] == (kv_heads, head_dim), f"k/v must be [T, {kv_heads}, {head_dim}]")
    check(k_cache.is_contiguous() and v_cache.is_contiguous(), "the caches must be contiguous")
    check(slots.dtype == torch.int64 and slots.shape == (k.shape[0],), "one int64 slot per token")
    check(head_dim & (head_dim - 1) == 0, "head_dim must be a power of 2")
    k, v = k.contiguous(), v.contiguous()
    if k.shape[0]:
        _kernel()[(k.shape[0], kv_heads)](k, v, k_cache, v_cache, slots, k.stride(0), k.stride(1),
                                          k_cache.stride(0), HEAD_DIM=head_dim)  # fmt: skip


def write_kv(k_cache, v_cache, k, v, slots):
    if use_triton(k) and triton_refuses(k_cache.shape[-1], 16) is None:
        write_kv_triton(k_cache, v_cache, k, v, slots)
    else:
        write_kv_ref(k_cache, v_cache, k, v, slots)

"""The C++ CPU decode kernel (K/V read in place) against the torch reference, and the fallback without it."""

import pytest
import torch

from kernels import cpu_extension
from kernels.paged_attention import _decode, paged_attention, paged_attention_ref
from tests.unit.kernels.test_triton_kernels import decode_case

ext = cpu_extension.extension()
needs_ext = pytest.mark.skipif(ext is None, reason="no C++ compiler here: the torch reference serves instead")


@needs_ext
@pytest.mark.parametrize("context_lens", [[1], [5, 12, 3], [16, 9], [33, 1, 64, 17]])
@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (4, 4), (8, 1)])
def test_the_kernel_equals_the_reference(context_lens, heads, kv_heads):
    q, k_cache, v_cache, meta = decode_case(context_lens, heads=heads, kv_heads=kv_heads)
    lens = torch.tensor(context_lens)
    expected = _decode(q, k_cache, v_cache, meta.block_tables, lens)
    got = ext.paged_decode(q, k_cache, v_cache, meta.block_tables, lens, q.shape[-1] ** -0.5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@needs_ext
def test_the_kernel_refuses_what_it_cannot_read():
    q, k_cache, v_cache, meta = decode_case([5])
    with pytest.raises(RuntimeError, match="fp32 only"):
        ext.paged_decode(q.double(), k_cache, v_cache, meta.block_tables, torch.tensor([5]), 0.25)


def test_paged_attention_on_cpu_equals_the_reference_with_or_without_the_kernel(monkeypatch):
    q, k_cache, v_cache, meta = decode_case([5, 12, 3])
    expected = paged_attention_ref(q, k_cache, v_cache, meta)
    torch.testing.assert_close(paged_attention(q, k_cache, v_cache, meta), expected, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(cpu_extension, "extension", lambda: None)  # as on a machine without a compiler
    torch.testing.assert_close(paged_attention(q, k_cache, v_cache, meta), expected, rtol=0, atol=0)

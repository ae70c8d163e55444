"""The C++ CPU kernels (decode attention with K/V read in place; RMSNorm, rotary, SiLU-and-mul) against the references."""

import subprocess
import sys

import pytest
import torch

from tandem_kernels import cpu_extension
from tandem_kernels.paged_attention import _decode, paged_attention, paged_attention_ref
from tests.unit.kernels.test_triton_kernels import decode_case

ext = cpu_extension.extension()
needs_ext = pytest.mark.skipif(
    ext is None,
    reason="C++ kernels not built (no compiler, or no `python -m tandem_kernels.cpu_extension`): the references serve",
)


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
@pytest.mark.parametrize("context_lens", [[1], [16, 17], [5, 300, 33, 64], [1000]])
@pytest.mark.parametrize("heads, kv_heads, head_dim", [(8, 2, 64), (4, 4, 16), (16, 1, 128), (14, 2, 32), (32, 1, 16)])
def test_the_vector_path_equals_the_reference(context_lens, heads, kv_heads, head_dim):
    # 16-token blocks, head_dim a multiple of 16, at most 16 query heads per KV head: in an AVX-512 build,
    # the vector path (scores 16 keys at a time); 32 per KV head, or a build without AVX-512, the scalar one
    q, k_cache, v_cache, meta = decode_case(context_lens, heads=heads, kv_heads=kv_heads, head_dim=head_dim, block=16)
    lens = torch.tensor(context_lens)
    expected = _decode(q, k_cache, v_cache, meta.block_tables, lens)
    got = ext.paged_decode(q, k_cache, v_cache, meta.block_tables, lens, head_dim**-0.5)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@needs_ext
def test_the_kernel_reads_strided_block_tables_and_lengths():
    q, k_cache, v_cache, meta = decode_case([5, 40, 17], heads=8, kv_heads=2, head_dim=64, block=16)
    lens = torch.tensor([5, 40, 17])
    expected = _decode(q, k_cache, v_cache, meta.block_tables, lens)
    wide = torch.zeros(3, 2 * meta.block_tables.shape[1], dtype=torch.int64)
    wide[:, ::2] = meta.block_tables  # a strided view: the kernel takes a contiguous copy and must keep it
    strided_lens = torch.stack([lens, lens], dim=1)[:, 0]
    got = ext.paged_decode(q, k_cache, v_cache, wide[:, ::2], strided_lens, 64**-0.5)
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


# -- the decoder layer's elementwise steps, one pass each ---------------------------------------------------


@needs_ext
@pytest.mark.parametrize("shape", [(1, 1, 8), (1, 37, 64), (2, 300, 512)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_kernel_equals_the_reference(shape, with_residual):
    from tandem_kernels.rms_norm import rms_norm_ref

    x, residual = torch.randn(shape) * 3, (torch.randn(shape) if with_residual else None)
    weight = torch.rand(shape[-1]) + 0.5
    out, h = ext.rms_norm(x, residual, weight, 1e-6)
    expected_out, expected_h = rms_norm_ref(x, weight, 1e-6, residual)
    torch.testing.assert_close(out, expected_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, expected_h, rtol=0, atol=0)


@needs_ext
@pytest.mark.parametrize("batch, tokens, heads, dim", [(1, 1, 1, 2), (1, 29, 4, 16), (2, 130, 8, 64)])
def test_rotary_kernel_equals_the_reference(batch, tokens, heads, dim):
    from tandem_kernels.rotary import apply_rotary_ref

    x = torch.randn(batch, tokens, heads, dim)  # a projection's output, heads not yet moved forward
    angles = torch.randn(batch, tokens, dim)
    cos, sin = angles.cos(), angles.sin()
    got = ext.rotary(x, cos, sin).transpose(1, 2)
    torch.testing.assert_close(got, apply_rotary_ref(x.transpose(1, 2), cos, sin), rtol=1e-6, atol=1e-6)


@needs_ext
@pytest.mark.parametrize("shape", [(1,), (3, 7), (1, 257, 1536)])
def test_silu_and_mul_kernel_equals_the_reference(shape):
    from tandem_kernels.silu_and_mul import silu_and_mul_ref

    gate, up = torch.randn(shape) * 6, torch.randn(shape)
    torch.testing.assert_close(ext.silu_and_mul(gate, up), silu_and_mul_ref(gate, up), rtol=1e-5, atol=1e-6)


@needs_ext
def test_the_elementwise_kernels_refuse_what_they_cannot_read():
    x = torch.randn(4, 8)
    with pytest.raises(RuntimeError, match="fp32 CPU tensors only"):
        ext.silu_and_mul(x.double(), x.double())
    with pytest.raises(RuntimeError, match="contiguous"):
        ext.rms_norm(x.t(), None, torch.ones(4), 1e-6)
    with pytest.raises(RuntimeError, match="one shape"):
        ext.silu_and_mul(x, torch.randn(4, 9))


@needs_ext
def test_the_dispatch_uses_the_kernels_only_where_the_references_would_give_the_same():
    from tandem_kernels.rms_norm import rms_norm, rms_norm_ref
    from tandem_kernels.rotary import apply_rotary, apply_rotary_ref

    x = torch.randn(2, 5, 16)
    with torch.inference_mode():
        assert cpu_extension.usable_for(x) is ext
        assert cpu_extension.usable_for(x.double()) is None  # fp32 only
        q = torch.randn(1, 5, 4, 16).transpose(1, 2)  # [batch, heads, tokens, d] over a projection's layout
        angles = torch.randn(1, 5, 16)
        torch.testing.assert_close(
            apply_rotary(q, angles.cos(), angles.sin()), apply_rotary_ref(q, angles.cos(), angles.sin())
        )
        strided = torch.randn(16, 5).t().unsqueeze(0)  # not contiguous: the reference serves
        torch.testing.assert_close(
            rms_norm(strided, torch.ones(16), 1e-6)[0], rms_norm_ref(strided, torch.ones(16), 1e-6)[0]
        )
    # Recording autograd: the C++ functions have no backward, so the references run.
    assert torch.is_grad_enabled() and cpu_extension.usable_for(x) is None
    weight = torch.ones(16, requires_grad=True)
    rms_norm(x, weight, 1e-6)[0].sum().backward()
    assert weight.grad is not None


def test_a_compiler_without_openmp_still_gets_the_kernels_on_one_thread():
    # The first variant cannot build here (an option no compiler knows), as -fopenmp cannot with Apple's clang.
    # Another key than the real build's: compiled once per machine, then loaded; at -O0, as what is tested is which
    # variant is built and what it says (a sixth less time in a fresh clone's `make test`).
    script = """
import logging, torch
logging.basicConfig(level=logging.WARNING)
from tandem_kernels import cpu_extension
cpu_extension.VARIANTS = [(["-O0", "-fno-such-option", "-fopenmp"], ["-fopenmp"]), (["-O0"], [])]
cpu_extension.build()
ext = cpu_extension.extension()
gate, up = torch.randn(300), torch.randn(300)
torch.testing.assert_close(ext.silu_and_mul(gate, up), torch.nn.functional.silu(gate) * up)
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr[-2000:]
    assert "built without OpenMP" in result.stderr and "one thread" in result.stderr

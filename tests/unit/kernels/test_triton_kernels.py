"""Each Triton kernel against its torch reference, on CPU through Triton's interpreter, small shapes.

Tolerances: fp32 inputs, so 1e-5 relative / 1e-5 absolute for elementwise and
norm kernels, 1e-4 for attention (a different summation order: online softmax
over blocks against one softmax over the gathered row).
"""

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported (kernels import it lazily)
pytest.importorskip("triton")

from tandem_kernels.paged_attention import PagedAttentionMetadata, paged_attention, paged_attention_ref  # noqa: E402
from tandem_kernels.rms_norm import rms_norm_ref, rms_norm_triton  # noqa: E402
from tandem_kernels.silu_and_mul import silu_and_mul_ref, silu_and_mul_triton  # noqa: E402


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("shape", [(3, 40), (2, 5, 1100)])  # the second spans two programs
def test_silu_and_mul(shape):
    gate, up = torch.randn(shape, generator=gen(1)), torch.randn(shape, generator=gen(2))
    torch.testing.assert_close(silu_and_mul_triton(gate, up), silu_and_mul_ref(gate, up), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("hidden", [64, 96])  # 96: not a power of two, masked lanes
def test_rms_norm_with_fused_residual(hidden, with_residual):
    x = torch.randn(4, hidden, generator=gen(3))
    residual = torch.randn(4, hidden, generator=gen(4)) if with_residual else None
    weight = torch.rand(hidden, generator=gen(5)) + 0.5
    out, h = rms_norm_triton(x, weight, 1e-6, residual)
    ref_out, ref_h = rms_norm_ref(x, weight, 1e-6, residual)
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, ref_h, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "scaling",
    [
        None,
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ],
)
def test_rotary_with_and_without_llama3_scaling(scaling):
    from modeling.layers.rotary import RotaryEmbedding
    from tandem_kernels.rotary import apply_rotary_ref, apply_rotary_triton

    x = torch.randn(2, 5, 3, 16, generator=gen(10)).transpose(1, 2)  # [batch, heads, tokens, dim], a view, as q arrives
    positions = torch.tensor([[0, 1, 2, 40, 41], [7, 8, 9, 10, 900]])
    cos, sin = RotaryEmbedding(16, 10000.0, scaling)(positions)
    torch.testing.assert_close(apply_rotary_triton(x, cos, sin), apply_rotary_ref(x, cos, sin), rtol=1e-5, atol=1e-5)


def test_kv_write_puts_each_token_in_its_slot():
    from tandem_kernels.kv_write import write_kv_ref, write_kv_triton

    k, v = torch.randn(6, 2, 16, generator=gen(11)), torch.randn(6, 2, 16, generator=gen(12))
    slots = torch.tensor([0, 5, 6, 7, 19, 3])  # scattered over blocks of 4
    caches = [torch.zeros(2, 5, 4, 16) for _ in range(4)]
    write_kv_triton(caches[0], caches[1], k, v, slots)
    write_kv_ref(caches[2], caches[3], k, v, slots)
    torch.testing.assert_close(caches[0], caches[2], rtol=0, atol=0)
    torch.testing.assert_close(caches[1], caches[3], rtol=0, atol=0)
    assert caches[0][1, 4, 3].tolist() == k[4, 1].tolist()  # slot 19: block 4, offset 3


def decode_case(context_lens: list[int], heads: int = 4, kv_heads: int = 2, head_dim: int = 16, block: int = 4):
    num_blocks = sum(-(-n // block) for n in context_lens) + 3
    k_cache = torch.randn(kv_heads, num_blocks, block, head_dim, generator=gen(6))
    v_cache = torch.randn(kv_heads, num_blocks, block, head_dim, generator=gen(7))
    order = torch.randperm(num_blocks, generator=gen(8)).tolist()  # scattered, as after reuse
    tables, width = [], max(-(-n // block) for n in context_lens)
    for n in context_lens:
        mine = [order.pop() for _ in range(-(-n // block))]
        tables.append(mine + [0] * (width - len(mine)))
    q = torch.randn(len(context_lens), heads, head_dim, generator=gen(9))
    meta = PagedAttentionMetadata.build(
        torch.empty(0, dtype=torch.int64), range(len(context_lens) + 1), context_lens, torch.tensor(tables)
    )
    return q, k_cache, v_cache, meta


@pytest.mark.parametrize("context_lens", [[1], [5, 12, 3], [16, 9]])  # partial, full and single-token blocks
def test_paged_decode_attention_matches_the_reference(monkeypatch, context_lens):
    q, k_cache, v_cache, meta = decode_case(context_lens)
    expected = paged_attention_ref(q, k_cache, v_cache, meta)
    monkeypatch.setenv("TANDEM_KERNELS", "triton")
    torch.testing.assert_close(paged_attention(q, k_cache, v_cache, meta), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (4, 4), (8, 1)])  # query heads per KV head: 2, 1, 8
@pytest.mark.parametrize("num_splits", [1, 2, 3, 8])  # 8 > the blocks of some sequences: empty splits
def test_split_k_decode_matches_the_reference(num_splits, heads, kv_heads):
    from tandem_kernels.paged_attention import paged_decode_triton

    q, k_cache, v_cache, meta = decode_case([1, 5, 17, 30, 9], heads=heads, kv_heads=kv_heads)
    expected = paged_attention_ref(q, k_cache, v_cache, meta)
    got = paged_decode_triton(q, k_cache, v_cache, meta.block_tables, torch.tensor(meta.context_lens), num_splits)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_decode_over_many_steps_of_keys_matches_the_reference(num_splits):
    """Contexts longer than one step's keys (decode_keys): steps that end inside a block, past a split's end."""
    from tandem_kernels.paged_attention import decode_keys, paged_decode_triton

    assert decode_keys(4, 16) == 128
    q, k_cache, v_cache, meta = decode_case([300, 129, 7, 256], heads=8, kv_heads=2)
    expected = paged_attention_ref(q, k_cache, v_cache, meta)
    got = paged_decode_triton(q, k_cache, v_cache, meta.block_tables, torch.tensor(meta.context_lens), num_splits)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_long_contexts_are_split():
    from tandem_kernels.paged_attention import decode_splits

    assert decode_splits(512) == 1 and decode_splits(8192) == 4 and decode_splits(131072) == 64


def test_few_sequences_are_split_to_fill_the_gpu():
    from tandem_kernels.paged_attention import MIN_SPLIT_KEYS, decode_splits

    # One sequence over 8 KV heads on 132 SMs: 33 splits, not the 16 its length alone asks for.
    assert decode_splits(32768, programs=8, multiprocessors=132) == 33
    assert decode_splits(512, programs=8, multiprocessors=132) == 512 // MIN_SPLIT_KEYS  # no split under 256 keys
    assert decode_splits(4096, programs=256 * 8, multiprocessors=132) == 2  # a full batch fills the GPU already


def test_paged_prefill_attention_matches_the_reference(monkeypatch):
    """Chunks with part of the prompt already cached, a chunk over two tiles, and a decode in the same step."""
    block, heads, kv_heads, head_dim = 16, 4, 2, 16
    queries = [20, 9, 18, 1]  # new tokens per sequence
    contexts = [20, 37, 50, 12]  # tokens in the cache after the step: 0, 28, 32 and 11 were there before
    num_blocks = sum(-(-n // block) for n in contexts) + 2
    k_cache = torch.randn(kv_heads, num_blocks, block, head_dim, generator=gen(20))
    v_cache = torch.randn(kv_heads, num_blocks, block, head_dim, generator=gen(21))
    order = torch.randperm(num_blocks, generator=gen(22)).tolist()
    width = max(-(-n // block) for n in contexts)
    tables = []
    for n in contexts:
        mine = [order.pop() for _ in range(-(-n // block))]
        tables.append(mine + [0] * (width - len(mine)))
    starts = [0]
    for n in queries:
        starts.append(starts[-1] + n)
    meta = PagedAttentionMetadata.build(torch.empty(0, dtype=torch.int64), starts, contexts, torch.tensor(tables))
    q = torch.randn(starts[-1], heads, head_dim, generator=gen(23))
    expected = paged_attention_ref(q, k_cache, v_cache, meta)
    assert meta.prefill_tiles.shape[0] == 5  # tiles of 16 queries: 20 -> 2, 9 -> 1, 18 -> 2; the decode has none
    monkeypatch.setenv("TANDEM_KERNELS", "triton")
    torch.testing.assert_close(paged_attention(q, k_cache, v_cache, meta), expected, rtol=1e-4, atol=1e-4)


def test_launchers_refuse_bad_arguments():
    with pytest.raises(ValueError, match="one shape"):
        silu_and_mul_triton(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="weight"):
        rms_norm_triton(torch.zeros(2, 8), torch.ones(4), 1e-6)
    from tandem_kernels.paged_attention import paged_decode_triton

    q, k_cache, v_cache, meta = decode_case([3], head_dim=12)
    with pytest.raises(ValueError, match="powers of 2"):
        paged_decode_triton(q, k_cache, v_cache, meta.block_tables, torch.tensor([3]))


def test_shapes_the_triton_kernels_cannot_take_run_the_references(monkeypatch):
    """(a review) A Phi-3-mini's head_dim 96, or `--block-size 24`: the launchers refuse them, and on CUDA, where
    every call went to Triton, every request failed. The dispatch runs the references for them now."""
    from tandem_kernels.dispatch import triton_refuses
    from tandem_kernels.kv_write import write_kv, write_kv_ref
    from tandem_kernels.rotary import apply_rotary, apply_rotary_ref

    assert triton_refuses(128, 16) is None and "powers of 2" in triton_refuses(96, 16)
    assert "powers of 2" in triton_refuses(64, 24)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert "16 or more on a GPU" in triton_refuses(64, 8) and "16 or more" in triton_refuses(
        8, 16
    )  # (any, interpreted)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    q, k_cache, v_cache, meta = decode_case([5, 12], head_dim=12)
    expected = paged_attention_ref(q, k_cache, v_cache, meta)
    x, cos, sin = torch.randn(1, 2, 3, 12), torch.randn(1, 3, 12), torch.randn(1, 3, 12)
    k, slots = torch.randn(2, 2, 12), torch.tensor([0, 5])
    caches = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
    write_kv_ref(*caches, k, k, slots)
    monkeypatch.setenv("TANDEM_KERNELS", "triton")
    torch.testing.assert_close(paged_attention(q, k_cache, v_cache, meta), expected)
    torch.testing.assert_close(apply_rotary(x, cos, sin), apply_rotary_ref(x, cos, sin))
    written = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
    write_kv(*written, k, k, slots)
    torch.testing.assert_close(written, caches)


def test_the_engine_through_the_triton_kernels_equals_hf(monkeypatch, demo_checkpoint):
    """The engine reaches the kernels through the dispatch: forced to Triton (interpreted), output is unchanged."""
    import tandem_kernels.kv_write
    import tandem_kernels.paged_attention
    import tandem_kernels.rms_norm
    import tandem_kernels.rotary
    import tandem_kernels.silu_and_mul
    from cloud_worker.build import build_engine
    from cloud_worker.engine.config import EngineConfig
    from tests.unit.cloud_worker.engine.test_engine_vs_hf import hf_greedy, mixed_prompts, run_batch

    launchers = (tandem_kernels.paged_attention._decode_kernel, tandem_kernels.paged_attention._prefill_kernel, tandem_kernels.rms_norm._kernel, tandem_kernels.silu_and_mul._kernel,
                 tandem_kernels.rotary._kernel, tandem_kernels.kv_write._kernel)  # fmt: skip
    before = [f.cache_info().hits + f.cache_info().misses for f in launchers]
    prompts = mixed_prompts(demo_checkpoint, 3)
    monkeypatch.setenv("TANDEM_KERNELS", "triton")
    engine = build_engine(demo_checkpoint, config=EngineConfig(num_kv_blocks=64))
    try:
        results = run_batch(engine, prompts, num_out=6)
    finally:
        engine.close()
    for prompt, (tokens, _) in zip(prompts, results, strict=True):
        assert tokens == hf_greedy(demo_checkpoint, prompt, 6)
    after = [f.cache_info().hits + f.cache_info().misses for f in launchers]
    assert all(a > b for a, b in zip(after, before, strict=True))  # every kernel was launched, many times


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("leading", [(5,), (2, 3)])  # a decode batch; [batch, tokens] as a layer sees it
def test_int8_linear_matches_the_reference(with_bias, leading):
    from tandem_kernels.int8_linear import int8_linear_ref, int8_linear_triton, quantize_per_channel

    weight_q, scale = quantize_per_channel(torch.randn(40, 72, generator=gen(30)))  # 40 x 72: ragged tiles
    x = torch.randn(*leading, 72, generator=gen(31))
    bias = torch.randn(40, generator=gen(32)) if with_bias else None
    got = int8_linear_triton(x, weight_q, scale, bias, block_n=16, block_k=32)
    torch.testing.assert_close(got, int8_linear_ref(x, weight_q, scale, bias), rtol=1e-4, atol=1e-4)


def test_an_int8_model_gives_the_same_logits_through_the_kernel(monkeypatch, demo_checkpoint):
    from cloud_worker.quantization import quantize_int8
    from modeling.loader import load_model

    model = quantize_int8(load_model(demo_checkpoint))
    ids = torch.tensor([[1, 309, 201, 428, 307, 265]])
    positions = torch.arange(6).unsqueeze(0)
    with torch.no_grad():
        monkeypatch.setenv("TANDEM_KERNELS", "torch")
        expected, _ = model(ids, positions, model.empty_cache())
        monkeypatch.setenv("TANDEM_KERNELS", "triton")
        got, _ = model(ids, positions, model.empty_cache())
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)

"""The Triton kernels on a real GPU, in bf16, against their references, and the engine against HF on the same GPU
(bench/gpu_suite.sh runs these)."""

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_silu_and_mul_bf16():
    from tandem_kernels.silu_and_mul import silu_and_mul_ref, silu_and_mul_triton

    gate, up = (torch.randn(64, 14336, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    torch.testing.assert_close(silu_and_mul_triton(gate, up), silu_and_mul_ref(gate, up), rtol=2e-2, atol=2e-2)


def test_rms_norm_bf16():
    from tandem_kernels.rms_norm import rms_norm_ref, rms_norm_triton

    x, res = (torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16)
    for a, b in zip(rms_norm_triton(x, w, 1e-5, res), rms_norm_ref(x, w, 1e-5, res), strict=True):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("context", [17, 1000, 8192])
def test_paged_decode_bf16_llama3_8b_heads(context):
    from tandem_kernels.paged_attention import PagedAttentionMetadata, paged_attention_ref, paged_decode_triton

    seqs, heads, kv_heads, dim, block = 8, 32, 8, 128, 16
    blocks_per_seq = -(-context // block)
    k = torch.randn(kv_heads, seqs * blocks_per_seq, block, dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    tables = torch.randperm(seqs * blocks_per_seq, device="cuda").view(seqs, blocks_per_seq)
    q = torch.randn(seqs, heads, dim, device="cuda", dtype=torch.bfloat16)
    lens = torch.full((seqs,), context, device="cuda", dtype=torch.int64)
    meta = PagedAttentionMetadata.build(
        torch.empty(0, dtype=torch.int64), range(seqs + 1), [context] * seqs, tables.cpu()
    ).to("cuda")
    expected = paged_attention_ref(q, k, v, meta)
    torch.testing.assert_close(paged_decode_triton(q, k, v, tables, lens), expected, rtol=2e-2, atol=2e-2)


def test_rotary_and_kv_write_bf16():
    from modeling.layers.rotary import RotaryEmbedding
    from tandem_kernels.kv_write import write_kv_ref, write_kv_triton
    from tandem_kernels.rotary import apply_rotary_ref, apply_rotary_triton

    x = torch.randn(4, 32, 64, 128, device="cuda", dtype=torch.bfloat16)
    cos, sin = RotaryEmbedding(128, 500000.0, None).cuda()(torch.arange(64, device="cuda").expand(4, 64))
    torch.testing.assert_close(apply_rotary_triton(x, cos, sin), apply_rotary_ref(x, cos, sin), rtol=2e-2, atol=2e-2)
    k, v = (torch.randn(256, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    slots = torch.randperm(64 * 16, device="cuda")[:256]
    caches = [torch.zeros(8, 64, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    write_kv_triton(caches[0], caches[1], k, v, slots)
    write_kv_ref(caches[2], caches[3], k, v, slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])


def test_sampling_kernel_draws_what_the_reference_draws():
    from tandem_kernels.sampling import sample_ref, sample_triton

    rows, vocab = 32, 128256
    logits = torch.randn(rows, vocab, device="cuda") * 4
    params = dict(
        temperature=torch.full((rows,), 0.8, device="cuda"),
        top_k=torch.tensor([0, 50] * (rows // 2), device="cuda"),
        top_p=torch.tensor([0.9, 1.0, 0.95, 0.5] * (rows // 4), device="cuda"),
        min_p=torch.zeros(rows, device="cuda"),
        seed=torch.arange(rows, device="cuda", dtype=torch.int64),
        step=torch.zeros(rows, device="cuda", dtype=torch.int64),
    )
    assert sample_triton(logits, **params).tolist() == sample_ref(logits, **params).tolist()


def test_paged_prefill_bf16_with_a_cached_prefix():
    from tandem_kernels.paged_attention import PagedAttentionMetadata, paged_attention_ref, paged_prefill_triton

    heads, kv_heads, dim, block = 32, 8, 128, 16
    queries, contexts = [300, 77, 1], [300, 1101, 64]  # a full prompt, a chunk after 1024 cached tokens, a decode
    width = max(-(-n // block) for n in contexts)
    k = torch.randn(kv_heads, len(contexts) * width, block, dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    tables = torch.randperm(len(contexts) * width).view(len(contexts), width)
    starts = [0, *torch.tensor(queries).cumsum(0).tolist()]  # [0, 300, 377, 378]
    meta = PagedAttentionMetadata.build(torch.empty(0, dtype=torch.int64), starts, contexts, tables).to("cuda")
    q = torch.randn(starts[-1], heads, dim, device="cuda", dtype=torch.bfloat16)
    expected = paged_attention_ref(q, k, v, meta)[:377]
    got = paged_prefill_triton(q, k, v, meta.block_tables, meta.lens, meta.prefill_tiles)[:377]
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("rows", [1, 64, 512])
def test_int8_linear_bf16(rows):
    from tandem_kernels.int8_linear import int8_linear_ref, int8_linear_triton, quantize_per_channel

    weight_q, scale = quantize_per_channel(torch.randn(4096, 4096, device="cuda"))
    x = torch.randn(rows, 4096, device="cuda", dtype=torch.bfloat16)
    expected = int8_linear_ref(x.float(), weight_q, scale).to(torch.bfloat16)
    torch.testing.assert_close(int8_linear_triton(x, weight_q, scale), expected, rtol=2e-2, atol=2e-1)


def test_decode_steps_replayed_from_cuda_graphs_equal_the_eager_engine(demo_checkpoint):
    from cloud_worker.build import build_engine
    from cloud_worker.engine.config import EngineConfig
    from tests.unit.cloud_worker.engine.test_engine_vs_hf import mixed_prompts, run_batch

    prompts = mixed_prompts(demo_checkpoint, 5)
    outputs = {}
    for mode in ("auto", "off"):
        engine = build_engine(demo_checkpoint, config=EngineConfig(device="cuda", num_kv_blocks=64, decode_graphs=mode))
        try:
            outputs[mode] = [tokens for tokens, _ in run_batch(engine, prompts, num_out=16)]
            if mode == "auto":
                assert engine.runner.graphs.num_replays > 0 and engine.runner.graphs.buckets[-1].graph is not None
        finally:
            engine.close()
    assert outputs["auto"] == outputs["off"]


def test_the_engine_in_fp32_gives_hf_fp32_greedy_tokens(demo_checkpoint, monkeypatch):
    """The CPU suite's oracle, on the GPU: in fp32 (bf16 rounding flips near-ties, so bf16 is not held to equality)
    the Triton kernels and the decode graphs give HF's greedy tokens, HF on the same GPU."""
    import cloud_worker.build
    from cloud_worker.build import build_engine
    from cloud_worker.engine.config import EngineConfig
    from tests.unit.cloud_worker.engine.test_engine_vs_hf import hf_greedy, mixed_prompts, run_batch

    prompts, num_out = mixed_prompts(demo_checkpoint, 6), 24
    expected = [hf_greedy(demo_checkpoint, prompt, num_out, device="cuda") for prompt in prompts]
    monkeypatch.setattr(cloud_worker.build, "model_dtype", lambda device: torch.float32)
    for mode in ("auto", "off"):
        engine = build_engine(demo_checkpoint, config=EngineConfig(device="cuda", num_kv_blocks=64, decode_graphs=mode))
        try:
            assert [tokens for tokens, _ in run_batch(engine, prompts, num_out=num_out)] == expected, mode
        finally:
            engine.close()

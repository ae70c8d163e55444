"""Oracle: the paged engine's greedy tokens equal HF transformers' token for token,
whatever the batch, the KV pool, the prefill chunking or the prefix cache."""

import asyncio
import functools
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

from cloud_worker.build import build_engine
from cloud_worker.engine.config import EngineConfig
from serving.engine_api import GenerationRequest, SamplingParams
from tandem.demo_model import CORPUS_PATH

NUM_OUT = 12


@functools.cache
def corpus_ids(checkpoint: Path) -> list[int]:
    return Tokenizer.from_file(str(checkpoint / "tokenizer.json")).encode(CORPUS_PATH.read_text()).ids


def mixed_prompts(checkpoint: Path, count: int) -> list[list[int]]:
    ids = corpus_ids(checkpoint)
    return [ids[i * 11 : i * 11 + 3 + (i * 37) % 90] for i in range(count)]  # 3 to 92 tokens


@functools.cache
def _hf(checkpoint: Path, device: str):
    return AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).to(device).eval()


def hf_greedy(checkpoint: Path, prompt: list[int], num_out: int = NUM_OUT, device: str = "cpu") -> list[int]:
    """HF's greedy tokens in fp32, its argmax at each step, past the end-of-sequence token as the engine runs here
    (ignore_eos). `generate(min_new_tokens=…)` masks that token: where it was the best, the oracle took the second
    best, and equal engines would have failed (a review)."""
    model, tokens = _hf(checkpoint, device), []
    with torch.no_grad():
        out = model(torch.tensor([prompt], device=device), use_cache=True)
        while len(tokens) < num_out:
            tokens.append(int(out.logits[0, -1].argmax()))
            out = model(torch.tensor([[tokens[-1]]], device=device), past_key_values=out.past_key_values)
    return tokens


async def _one(engine, name: str, prompt: list[int], num_out: int):
    request = GenerationRequest(name, tuple(prompt), SamplingParams(max_tokens=num_out, ignore_eos=True))
    tokens, last = [], None
    async for chunk in engine.generate(request):
        tokens += chunk.token_ids
        last = chunk
    return tokens, last.usage


def run_batch(engine, prompts: list[list[int]], num_out: int = NUM_OUT):
    """All prompts submitted at once, so the engine batches them."""

    async def main():
        return await asyncio.gather(*(_one(engine, f"r{i}", p, num_out) for i, p in enumerate(prompts)))

    return asyncio.run(main())


@pytest.fixture
def make_engine(demo_checkpoint):
    engines = []

    def make(**config):
        engine = build_engine(demo_checkpoint, config=EngineConfig(**{"num_kv_blocks": 256} | config))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()
        engine.block_manager.check_invariants([])


@pytest.mark.parametrize("batch_size", [1, 2, 7, 32])
def test_batches_of_mixed_lengths_equal_hf(demo_checkpoint, make_engine, batch_size):
    prompts = mixed_prompts(demo_checkpoint, batch_size)
    results = run_batch(make_engine(), prompts)
    for prompt, (tokens, _) in zip(prompts, results, strict=True):
        assert tokens == hf_greedy(demo_checkpoint, prompt)


def test_a_pool_too_small_for_the_batch_preempts_and_still_equals_hf(demo_checkpoint, make_engine):
    prompts = mixed_prompts(demo_checkpoint, 12)
    engine = make_engine(num_kv_blocks=16, block_size_tokens=8)  # 128 token slots for ~600 tokens of work
    results = run_batch(engine, prompts)
    assert engine.scheduler.num_preemptions > 0
    for prompt, (tokens, _) in zip(prompts, results, strict=True):
        assert tokens == hf_greedy(demo_checkpoint, prompt)


def test_chunked_prefill_equals_hf(demo_checkpoint, make_engine):
    prompts = [p for p in mixed_prompts(demo_checkpoint, 12) if len(p) > 40][:4]
    engine = make_engine(max_num_batched_tokens=7)  # every prompt takes several steps
    results = run_batch(engine, prompts)
    for prompt, (tokens, _) in zip(prompts, results, strict=True):
        assert tokens == hf_greedy(demo_checkpoint, prompt)


@pytest.mark.parametrize(
    ("prompt_len", "cached"),
    [(37, 32), (32, 16)],  # full blocks served; at a block boundary the last block is recomputed
    ids=["full-block", "block-boundary"],
)
def test_warm_prefix_hit_equals_cold_run_and_hf(demo_checkpoint, make_engine, prompt_len, cached):
    prompt = corpus_ids(demo_checkpoint)[5 : 5 + prompt_len]
    engine = make_engine(block_size_tokens=16)
    [(cold, cold_usage)] = run_batch(engine, [prompt])
    [(warm, warm_usage)] = run_batch(engine, [prompt])
    assert cold_usage.cached_prompt_tokens == 0
    assert warm_usage.cached_prompt_tokens == cached
    assert warm == cold == hf_greedy(demo_checkpoint, prompt)
    stats = engine.stats()
    assert (stats.prefix_hit_tokens, stats.prefix_query_tokens) == (cached, 2 * prompt_len)
    assert engine.block_manager.events == []  # drained every step, even with no hint publisher


def test_a_shared_system_prompt_is_served_from_cache_inside_one_batch(demo_checkpoint, make_engine):
    ids = corpus_ids(demo_checkpoint)
    system = ids[:48]
    engine = make_engine(block_size_tokens=16)
    run_batch(engine, [system + ids[100:105]])  # warms the 3 system blocks
    prompts = [system + ids[200 + 9 * i : 205 + 9 * i] for i in range(4)]
    results = run_batch(engine, prompts)
    for prompt, (tokens, usage) in zip(prompts, results, strict=True):
        assert usage.cached_prompt_tokens == 48
        assert tokens == hf_greedy(demo_checkpoint, prompt)


def test_tensor_parallel_2_equals_tp_1_and_hf(demo_checkpoint, make_engine):
    prompts = mixed_prompts(demo_checkpoint, 6)
    one = run_batch(make_engine(), prompts)
    two = run_batch(make_engine(tensor_parallel_size=2), prompts)  # starts rank 1 itself, gloo between them
    for prompt, (a, _), (b, _) in zip(prompts, one, two, strict=True):
        assert a == b == hf_greedy(demo_checkpoint, prompt)


def test_int8_weights_keep_the_first_tokens_and_the_logits_close(demo_checkpoint):
    from cloud_worker.build import prepare_model
    from cloud_worker.quantization import Int8Linear

    fp32 = prepare_model(demo_checkpoint, EngineConfig())
    int8 = prepare_model(demo_checkpoint, EngineConfig(quantize="int8"))
    assert isinstance(int8.model.layers[0].mlp.down_proj, Int8Linear)
    ids = torch.tensor([corpus_ids(demo_checkpoint)[:200]])
    positions = torch.arange(200).unsqueeze(0)
    with torch.no_grad():
        a = fp32(ids, positions, fp32.empty_cache())[0][0]
        b = int8(ids, positions, int8.empty_cache())[0][0]
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1)
    assert cosine.min() > 0.99
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.95

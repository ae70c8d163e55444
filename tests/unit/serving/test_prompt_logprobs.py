"""Prompt log-probabilities (completions' echo with logprobs) equal HF transformers' on both engines."""

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM

from cloud_worker.build import build_engine
from cloud_worker.engine.config import EngineConfig
from serving.engine_api import GenerationRequest, SamplingParams
from tests.unit.cloud_worker.engine.test_engine_vs_hf import corpus_ids


def hf_prompt_logprobs(checkpoint, prompt: list[int]) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0]
    return torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(prompt[1:]).unsqueeze(1)).squeeze(1).tolist()


async def scores(engine, prompt, name="r", k=2):
    params = SamplingParams(max_tokens=2, temperature=0, prompt_logprobs=k, ignore_eos=True)
    chunks = [c async for c in engine.generate(GenerationRequest(name, tuple(prompt), params))]
    scored = [c for c in chunks if c.prompt_logprobs]
    assert len(scored) == 1 and not scored[0].token_ids and chunks.index(scored[0]) == 0
    return list(scored[0].prompt_logprobs), list(scored[0].prompt_top_logprobs)


def test_both_engines_score_the_prompt_as_hf_does(engine, demo_checkpoint):
    prompt = corpus_ids(demo_checkpoint)[:40]
    got, tops = asyncio.run(scores(engine, prompt))
    assert got == pytest.approx(hf_prompt_logprobs(demo_checkpoint, prompt), abs=1e-4)
    assert len(tops) == len(prompt) - 1 and all(len(t) == 2 and t[0][1] >= t[1][1] for t in tops)


def test_chunked_prefill_and_a_warm_prefix_cache_do_not_change_the_scores(demo_checkpoint):
    # Chunks of 16 tokens, and the prompt's prefix cached by an earlier request: every position is still scored.
    engine = build_engine(demo_checkpoint, config=EngineConfig(num_kv_blocks=64, max_num_batched_tokens=16))
    try:
        prompt = corpus_ids(demo_checkpoint)[:70]

        async def run():
            plain = SamplingParams(max_tokens=1, temperature=0)
            async for _ in engine.generate(GenerationRequest("warm", tuple(prompt), plain)):
                pass
            return await asyncio.gather(scores(engine, prompt, "a"), scores(engine, prompt[:33], "b"))

        (long, _), (short, _) = asyncio.run(run())
    finally:
        engine.close()
    assert long == pytest.approx(hf_prompt_logprobs(demo_checkpoint, prompt), abs=1e-4)
    assert short == pytest.approx(long[:32], abs=1e-4)

"""Decode steps through the bucketed static inputs of the CUDA-graph path, run eagerly on CPU.

Everything but the capture itself: padding to the bucket, the scratch slot the padding rows write, static
block tables wider than any sequence's, and the fallback to the normal path for steps with prefill.
"""

import pytest

from cloud_worker.build import build_engine
from cloud_worker.engine.config import EngineConfig
from tests.unit.cloud_worker.engine.test_engine_vs_hf import hf_greedy, mixed_prompts, run_batch


@pytest.mark.parametrize("batch_size", [1, 3, 5])  # buckets 1, 4 (one padding row) and 8 (three)
def test_decode_steps_from_the_graph_buckets_equal_hf(demo_checkpoint, batch_size):
    prompts = mixed_prompts(demo_checkpoint, batch_size)
    engine = build_engine(demo_checkpoint, config=EngineConfig(num_kv_blocks=64, decode_graphs="eager"))
    try:
        graphs = engine.runner.graphs
        assert engine.block_manager.num_blocks == 64 and engine.runner.kv_caches[0][0].shape[1] == 65
        results = run_batch(engine, prompts, num_out=8)
        scratch = engine.runner.kv_caches[0][0][:, graphs.scratch_block]
    finally:
        engine.close()
    for prompt, (tokens, _) in zip(prompts, results, strict=True):
        assert tokens == hf_greedy(demo_checkpoint, prompt, 8)
    assert graphs.num_replays >= 7  # decode steps went through the buckets; prefill steps did not
    if batch_size in (3, 5):
        assert scratch[:, 0].abs().sum() > 0  # padding rows wrote their K/V to the scratch slot only
        assert scratch[:, 1:].abs().sum() == 0


def test_graphs_are_off_on_cpu_by_default_and_under_tensor_parallelism():
    assert EngineConfig(device="cpu").decode_graph_mode() is None
    assert EngineConfig(device="cuda").decode_graph_mode() == "capture"
    assert EngineConfig(device="cuda", tensor_parallel_size=2).decode_graph_mode() is None
    assert EngineConfig(device="cuda", decode_graphs="off").decode_graph_mode() is None
    with pytest.raises(ValueError, match="decode_graphs"):
        EngineConfig(decode_graphs="sometimes")

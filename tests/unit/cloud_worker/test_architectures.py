"""Llama, Qwen3 (qk-norm) and Phi-3 (fused qkv and gate-up), saved by the installed transformers itself, against
HF on the cloud engine and through the edge export; config fields that change the math and are not implemented are
refused by name."""

import json
import shutil

import pytest
import torch
import transformers
from safetensors import safe_open

from cloud_worker.build import build_engine as build_cloud
from cloud_worker.engine.config import EngineConfig
from edge_agent.export import cached_export
from edge_agent.server import engine_for
from modeling.model_config import CheckpointError, ModelConfig, UnsupportedModelError
from tests.checkpoints import assert_logits_equal_hf
from tests.unit.cloud_worker.engine.test_engine_vs_hf import corpus_ids, hf_greedy, run_batch

SHAPE = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
)
ARCHITECTURES = {
    # Class names, looked up when used: importing a modeling class imports torch._dynamo and with it triton, which
    # must not happen before tests/conftest.py switches on Triton's interpreter (one xdist process).
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=5000.0)),
    # with attention_bias: biases on q, k, v and o (o's is added once under tensor parallelism)
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=16, rope_theta=5000.0, attention_bias=True)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(rope_theta=5000.0, pad_token_id=0, bos_token_id=1)),
}
NEW_TOKENS = 16


def _wide_spread(model: torch.nn.Module, seed: int = 3) -> None:
    """Weights whose logits are far apart (greedy decoding stays clear of near-ties, as the demo model's do)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            elif name == "lm_head.weight":
                p.copy_(0.5 * noise)
            else:
                p.copy_(noise * p.shape[-1] ** -0.5)


@pytest.fixture(scope="module", params=sorted(ARCHITECTURES))
def saved(request, demo_checkpoint, tmp_path_factory):
    """A tiny checkpoint as `save_pretrained` of the installed transformers writes it, with the demo's tokenizer."""
    config_name, model_name, extra = ARCHITECTURES[request.param]
    config_class, model_class = getattr(transformers, config_name), getattr(transformers, model_name)
    eos = json.loads((demo_checkpoint / "config.json").read_text())["eos_token_id"]
    config = config_class(**SHAPE, **extra, eos_token_id=eos, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = model_class(config).eval()
    _wide_spread(model)
    path = tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}"
    model.save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(demo_checkpoint / name, path / name)
    return request.param, path


def _engine_greedy(engine, prompt: list[int]) -> list[int]:
    try:
        [(tokens, _)] = run_batch(engine, [prompt], NEW_TOKENS)
        return tokens
    finally:
        engine.close()


def test_the_checkpoint_is_read_as_the_architecture_it_is(saved):
    name, path = saved
    config = ModelConfig.from_hf(json.loads((path / "config.json").read_text()))
    assert config.rope_theta == 5000.0  # from rope_parameters, as transformers 5 saves it
    assert config.qk_norm == (name == "qwen3")
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        stored = set(f.keys())
    fused = {"model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"}
    assert (fused <= stored) == (name == "phi3")  # stored fused, as HF's Phi-3 modules hold them
    assert ("model.layers.0.self_attn.q_norm.weight" in stored) == (name == "qwen3")


def test_logits_equal_hf(saved):
    _, path = saved
    assert_logits_equal_hf(path, torch.tensor([corpus_ids(path)[:80]]))


def test_greedy_tokens_equal_hf_on_the_cloud_engine_and_through_the_edge_export(saved, tmp_path):
    _, path = saved
    prompt = corpus_ids(path)[:40]
    expected = hf_greedy(path, prompt, NEW_TOKENS)
    assert _engine_greedy(build_cloud(path), prompt) == expected
    edge = engine_for(cached_export(path, tmp_path / "edge-cache"), path)
    assert _engine_greedy(edge, prompt) == expected


def test_tensor_parallel_2_equals_hf(saved):
    name, path = saved
    if name != "qwen3":
        pytest.skip("one architecture is enough here: qk-norm and an o_proj bias split over 2 ranks")
    prompt = corpus_ids(path)[:40]
    engine = build_cloud(path, config=EngineConfig(num_kv_blocks=64, tensor_parallel_size=2))
    assert _engine_greedy(engine, prompt) == hf_greedy(path, prompt, NEW_TOKENS)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
        ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"use_qk_norm": True}, "use_qk_norm"),
        ({"layer_types": ["sliding_attention", "full_attention"]}, "layer_types"),
        ({"layer_types": ["chunked_attention", "full_attention"]}, "layer_types"),
        ({"num_local_experts": 8}, "num_local_experts"),
        ({"some_future_logit_softcap": 5.0}, "some_future_logit_softcap"),  # unknown, but its name says math
        ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "rope_parameters"),
        (
            {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.75}},
            "partial_rotary_factor",
        ),  # fmt: skip
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling"),
    ],
)
def test_a_field_that_changes_the_math_and_is_not_implemented_is_refused_by_name(demo_checkpoint, changes, field):
    config = json.loads((demo_checkpoint / "config.json").read_text()) | changes
    with pytest.raises(UnsupportedModelError, match=field):
        ModelConfig.from_hf(config)


@pytest.mark.parametrize(
    ("scaling", "said"),
    [
        ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
         "rope_scaling.low_freq_factor is null"),
        ({"type": "linear"}, "rope_scaling.factor is null"),
        ({"type": "linear", "factor": "4"}, 'rope_scaling.factor is "4"'),
        ({"type": "linear", "factor": 0}, "rope_scaling.factor is 0"),  # (a model whose every logit was NaN)
        ([{"type": "linear", "factor": 2}], "rope_scaling is .*; an object or null"),
        ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 2.0,
          "original_max_position_embeddings": 8192}, "are equal"),
    ],
)  # fmt: skip
def test_a_rope_scaling_without_the_numbers_it_is_computed_from_is_refused_by_name(demo_checkpoint, scaling, said):
    """(a review) Each was a KeyError, TypeError or AttributeError's traceback from the export and the worker, or,
    for a factor of 0, a model that exported and served NaN."""
    config = json.loads((demo_checkpoint / "config.json").read_text()) | {"rope_scaling": scaling}
    with pytest.raises(CheckpointError, match=said):
        ModelConfig.from_hf(config)


def test_fields_at_their_neutral_values_are_accepted(demo_checkpoint):
    neutral = {
        "final_logit_softcapping": None,
        "mlp_bias": False,
        "layer_types": ["full_attention", "full_attention"],
        "attention_dropout": 0.0,  # training only
        "pretraining_tp": 1,
        "some_future_logit_softcap": None,
    }
    config = json.loads((demo_checkpoint / "config.json").read_text()) | neutral
    assert ModelConfig.from_hf(config).num_hidden_layers == 2

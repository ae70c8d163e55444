"""Oracle: our model and engine against Hugging Face transformers on the same checkpoint."""

import asyncio
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from cloud_worker.build import build_engine
from modeling.loader import CheckpointError, load_model
from modeling.model_config import ModelConfig, UnsupportedModelError
from serving.engine_api import GenerationRequest, SamplingParams
from tests.checkpoints import assert_logits_equal_hf, make_variant

PROMPTS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "How many days are in a week?"}],
    [{"role": "user", "content": "The quick brown fox " * 20}],
]


def hf_model(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def chat_ids(path, messages) -> list[int]:
    return AutoTokenizer.from_pretrained(path).apply_chat_template(
        messages, add_generation_prompt=True, return_dict=True
    )["input_ids"]


async def engine_tokens(engine, prompt_ids, max_tokens) -> list[int]:
    request = GenerationRequest("r", tuple(prompt_ids), SamplingParams(temperature=0, max_tokens=max_tokens))
    return [t async for chunk in engine.generate(request) for t in chunk.token_ids]


@pytest.mark.parametrize("messages", PROMPTS)
def test_engine_greedy_tokens_equal_hf_generate(demo_checkpoint, messages):
    prompt = chat_ids(demo_checkpoint, messages)
    with torch.no_grad():
        hf_out = hf_model(demo_checkpoint).generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False)
    expected = [t for t in hf_out[0, len(prompt) :].tolist() if t != 2]  # our chunks carry no eos id
    engine = build_engine(demo_checkpoint)
    try:
        assert asyncio.run(engine_tokens(engine, prompt, 32)) == expected
    finally:
        engine.close()


VARIANTS = {
    "qwen2-qkv-bias-tied": dict(
        config_changes={"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "use_sliding_window": False},
        tie_embeddings=True,
        qkv_bias=True,
    ),
    "llama3-rope-scaling": dict(
        config_changes={
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            }
        },
    ),
    "linear-rope-scaling": dict(config_changes={"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    "mistral": dict(
        config_changes={"architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": None}
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_equal_hf_for_llama_family_variants(demo_checkpoint, tmp_path, variant):
    path = make_variant(demo_checkpoint, tmp_path / variant, **VARIANTS[variant])
    assert_logits_equal_hf(path, torch.tensor([chat_ids(path, PROMPTS[2])]))  # long enough for scaled rope to matter


def test_decoding_with_cache_equals_full_forward(demo_checkpoint):
    model = load_model(demo_checkpoint)
    ids = torch.tensor([chat_ids(demo_checkpoint, PROMPTS[0])])
    n = ids.shape[1]
    with torch.no_grad():
        full, _ = model(ids, torch.arange(n).unsqueeze(0), model.empty_cache())
        _, cache = model(ids[:, :-3], torch.arange(n - 3).unsqueeze(0), model.empty_cache())
        tail, _ = model(ids[:, -3:], torch.arange(n - 3, n).unsqueeze(0), cache)
    torch.testing.assert_close(tail, full[:, -3:], atol=1e-5, rtol=1e-5)


def test_unsupported_architecture_is_refused_by_name(demo_checkpoint, tmp_path):
    path = make_variant(demo_checkpoint, tmp_path / "gpt2", {"architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(UnsupportedModelError, match="GPT2LMHeadModel"):
        load_model(path)


def test_missing_weights_file_is_a_clear_error(demo_checkpoint, tmp_path):
    path = make_variant(demo_checkpoint, tmp_path / "broken", {})
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_model(path)


@pytest.mark.parametrize(
    ("index", "said"),
    [
        ('{"weight_map": {"a": "model-1.safet', "not valid JSON"),
        ('{"metadata": {}}', "weight_map is no object"),
        ('{"weight_map": ["model-1.safetensors"]}', "weight_map is no object"),
        ('{"weight_map": {"a": "../../elsewhere.safetensors"}}', "weight_map is no object .* in its folder"),
    ],
)
def test_a_shard_index_that_cannot_be_read_is_a_clear_error(demo_checkpoint, tmp_path, index, said):
    """(a review) Each was a JSONDecodeError, KeyError or AttributeError traceback from the export and the agent."""
    path = make_variant(demo_checkpoint, tmp_path / "sharded", {})
    (path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(CheckpointError, match=f"model.safetensors.index.json: {said}"):
        load_model(path)


def test_a_weights_file_cut_short_is_a_clear_error(demo_checkpoint, tmp_path):
    """(a review) A truncated model.safetensors stopped `tandem up` with a SafetensorError traceback that named
    neither the file nor what to do."""
    path = make_variant(demo_checkpoint, tmp_path / "cut", {})
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="model.safetensors: not a whole safetensors file"):
        load_model(path)


@pytest.mark.parametrize(
    ("changes", "context"),
    [
        ({"architectures": ["MistralForCausalLM"], "sliding_window": 4096, "max_position_embeddings": 32768}, 4096),
        ({"architectures": ["MistralForCausalLM"], "sliding_window": None, "max_position_embeddings": 32768}, 32768),
        ({"architectures": ["Qwen2ForCausalLM"], "sliding_window": 4096, "use_sliding_window": False}, 2048),
        ({"architectures": ["Qwen2ForCausalLM"], "sliding_window": 1024, "use_sliding_window": True}, 1024),
    ],
)
def test_a_sliding_window_caps_the_served_context(demo_checkpoint, changes, context):
    hf = json.loads((demo_checkpoint / "config.json").read_text()) | changes
    assert ModelConfig.from_hf(hf).max_position_embeddings == context

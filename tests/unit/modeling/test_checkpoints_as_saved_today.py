"""Checkpoints as transformers 5 saves them: rope settings in rope_parameters, the chat template in its own file,
sampling defaults in generation_config.json."""

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from cloud_worker.build import build_engine
from cloud_worker.engine.config import EngineConfig
from modeling.model_config import ModelConfig, UnsupportedModelError
from serving.checkpoint import GenerationDefaults
from serving.openai.chat_tokenizer import ChatTokenizer
from serving.openai.schemas import ChatCompletionRequest
from tests.checkpoints import assert_logits_equal_hf
from tests.unit.cloud_worker.engine.test_engine_vs_hf import corpus_ids, hf_greedy, run_batch

THETA = 500.0  # far from the 10,000 a loader that missed rope_parameters would fall back to


@pytest.fixture(scope="module")
def saved_today(demo_checkpoint, tmp_path_factory):
    path = tmp_path_factory.mktemp("today") / "tandem-demo"
    shutil.copytree(demo_checkpoint, path)
    config = json.loads((path / "config.json").read_text())
    config.pop("rope_theta"), config.pop("rope_scaling")
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": THETA}
    (path / "config.json").write_text(json.dumps(config))
    tokenizer_config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "chat_template.jinja").write_text(tokenizer_config.pop("chat_template"))
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return path


def test_rope_parameters_are_read_and_greedy_tokens_equal_hf(saved_today):
    config = ModelConfig.from_hf(json.loads((saved_today / "config.json").read_text()))
    assert config.rope_theta == THETA and config.rope_scaling is None
    hf = AutoModelForCausalLM.from_pretrained(saved_today, dtype=torch.float32).eval()
    assert hf.config.rope_parameters["rope_theta"] == THETA  # the oracle reads it too
    prompt = corpus_ids(saved_today)[:60]
    expected = hf_greedy(saved_today, prompt, 12)  # HF's argmax at each step, past the end-of-sequence token
    engine = build_engine(saved_today, config=EngineConfig(num_kv_blocks=64))
    try:
        [(tokens, _)] = run_batch(engine, [prompt])
    finally:
        engine.close()
    assert tokens == expected


@pytest.mark.parametrize(
    "rope_parameters",
    [{"full_attention": {"rope_type": "default", "rope_theta": 1e4}}, {"rope_type": "default"}],
)
def test_rope_parameters_that_cannot_be_read_are_an_error_naming_them(saved_today, rope_parameters):
    config = json.loads((saved_today / "config.json").read_text()) | {"rope_parameters": rope_parameters}
    with pytest.raises(UnsupportedModelError, match="rope_parameters"):
        ModelConfig.from_hf(config)


def test_a_chat_template_in_its_own_file_is_found(saved_today, demo_checkpoint):
    messages = [{"role": "user", "content": "hi"}]
    assert ChatTokenizer(saved_today).encode_chat(messages) == ChatTokenizer(demo_checkpoint).encode_chat(messages)


@pytest.mark.parametrize(
    ("saved", "request_fields", "expected"),
    [
        # Qwen2.5-Instruct's generation_config.json
        ({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}, {},
         {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0, "repetition_penalty": 1.05}),
        # what the request sets wins, field by field
        ({"do_sample": True, "temperature": 0.7, "top_p": 0.8}, {"temperature": 1.0},
         {"temperature": 1.0, "top_p": 0.8, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}),
        # HF generate is greedy when the file says do_sample false
        ({"do_sample": False}, {}, {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}),
        # no sampling fields (Mistral's): OpenAI's defaults
        ({"bos_token_id": 1, "eos_token_id": 2}, {},
         {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}),
    ],
)  # fmt: skip
def test_generation_config_defaults_apply_where_the_request_is_silent(
    saved_today, tmp_path, saved, request_fields, expected
):
    path = shutil.copytree(saved_today, tmp_path / "model")
    GenerationConfig(**saved).save_pretrained(path)  # as transformers writes it
    body = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **request_fields)
    assert body.sampling(ChatTokenizer(path).generation_defaults) == expected


@pytest.mark.parametrize(
    ("saved", "field"),
    [('{"temperature": "hot"}', "temperature"), ('{"top_p": 0}', "top_p"), ('{"temperature": 0.001}', "temperature"),
     ('{"repetition_penalty": 0}', "repetition_penalty"), ('{"top_k": 2.5}', "top_k"), ('{"min_p": NaN}', "min_p")],
)  # fmt: skip
def test_a_generation_config_that_cannot_be_served_is_an_error_naming_the_field(saved_today, tmp_path, saved, field):
    """At start, not on every request that leaves the field unset (the client never sent the bad value)."""
    broken = shutil.copytree(saved_today, tmp_path / "broken")
    (broken / "generation_config.json").write_text(saved)
    with pytest.raises(ValueError, match=f"generation_config.json: {field}"):
        GenerationDefaults.read(broken)


def test_top_k_minus_one_is_off_and_a_sliding_window_caps_the_context_the_gateway_serves(saved_today, tmp_path):
    path = shutil.copytree(saved_today, tmp_path / "m")
    (path / "generation_config.json").write_text('{"top_k": -1}')
    assert dict(GenerationDefaults.read(path).values)["top_k"] == 0
    config = json.loads((path / "config.json").read_text())
    config |= {"architectures": ["MistralForCausalLM"], "sliding_window": 1024, "max_position_embeddings": 32768}
    (path / "config.json").write_text(json.dumps(config))
    # the gateway refuses what the worker cannot serve, and /v1/models says the same
    assert ChatTokenizer(path).max_context_tokens == ModelConfig.from_hf(config).max_position_embeddings == 1024


@pytest.mark.parametrize(
    "rope_parameters",
    [
        {"rope_type": "linear", "rope_theta": THETA, "factor": 2.0},
        {"rope_type": "llama3", "rope_theta": THETA, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 64},
    ],
    ids=["linear", "llama3"],
)  # fmt: skip
def test_every_rope_type_read_from_rope_parameters_gives_hf_logits(saved_today, tmp_path, rope_parameters):
    """Each rope type the loader supports, as transformers 5 writes it (rope_parameters, no rope_scaling)."""
    path = shutil.copytree(saved_today, tmp_path / "m")
    config = json.loads((path / "config.json").read_text()) | {"rope_parameters": rope_parameters}
    (path / "config.json").write_text(json.dumps(config))
    assert ModelConfig.from_hf(config).rope_scaling["rope_type"] == rope_parameters["rope_type"]
    assert_logits_equal_hf(path, torch.tensor([corpus_ids(path)[:200]]))  # long enough for the scaling to matter

"""Checkpoints as transformers 5 saves them: rope settings in rope_parameters, the chat template in its own file."""

import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from cloud_worker.engine.config import EngineConfig
from cloud_worker.model_config import ModelConfig, UnsupportedModelError
from cloud_worker.server import build_engine
from gateway.chat_tokenizer import ChatTokenizer
from tests.unit.cloud_worker.engine.test_engine_vs_hf import corpus_ids, run_batch

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
    with torch.no_grad():
        expected = hf.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                               pad_token_id=0)[0, len(prompt):].tolist()  # fmt: skip
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

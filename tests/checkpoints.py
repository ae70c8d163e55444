"""Variants of the demo checkpoint that exercise other Llama-family configs, and the logits oracle they are held to."""

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def make_variant(
    base: Path, out: Path, config_changes: dict, tie_embeddings: bool = False, qkv_bias: bool = False
) -> Path:
    shutil.copytree(base, out)
    config = json.loads((out / "config.json").read_text()) | config_changes
    tensors = load_file(str(out / "model.safetensors"))
    gen = torch.Generator().manual_seed(1)
    if qkv_bias:
        for name in [n for n in tensors if n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight"))]:
            tensors[name.replace("weight", "bias")] = torch.randn(tensors[name].shape[0], generator=gen) * 0.1
    if tie_embeddings:
        del tensors["lm_head.weight"]
        config["tie_word_embeddings"] = True
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def assert_logits_equal_hf(path: Path, ids: torch.Tensor) -> None:
    """Our model's logits over ids [1, tokens] equal HF transformers' on the same checkpoint, at every position."""
    from transformers import AutoModelForCausalLM

    from modeling.loader import load_model

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ours = load_model(path)
    with torch.no_grad():
        expected = hf(ids).logits
        got, _ = ours(ids, torch.arange(ids.shape[1]).unsqueeze(0), ours.empty_cache())
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)

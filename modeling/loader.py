"""Load a Hugging Face checkpoint directory: config.json and safetensors shards."""

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from modeling.llama import LlamaForCausalLM
from modeling.model_config import CheckpointError, ModelConfig, UnsupportedModelError, read_json_object

__all__ = ["CheckpointError", "UnsupportedModelError", "load_model", "read_config", "weight_files"]


def read_config(checkpoint_dir: Path) -> ModelConfig:
    config_path = Path(checkpoint_dir) / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{checkpoint_dir}: no config.json (is this a Hugging Face checkpoint directory?)")
    hf = read_json_object(config_path)
    generation_path = Path(checkpoint_dir) / "generation_config.json"
    if generation_path.is_file():
        # generation_config.json's eos list is what HF generate stops on.
        generation_eos = read_json_object(generation_path).get("eos_token_id")
        if generation_eos is not None:
            hf = hf | {"eos_token_id": generation_eos}
    try:
        return ModelConfig.from_hf(hf)
    except CheckpointError as exc:
        raise CheckpointError(f"{checkpoint_dir}/{exc}") from None


def weight_files(checkpoint_dir: Path) -> list[Path]:
    checkpoint_dir = Path(checkpoint_dir)
    index = checkpoint_dir / "model.safetensors.index.json"
    if index.is_file():  # (a review: cut short, without its map, or its map a list, each was a traceback)
        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(_shard_name(v) for v in weight_map.values()):
            raise CheckpointError(f"{index}: weight_map is no object of tensor names to file names in its folder")
        return [checkpoint_dir / s for s in sorted(set(weight_map.values()))]
    single = checkpoint_dir / "model.safetensors"
    if single.is_file():
        return [single]
    raise CheckpointError(f"{checkpoint_dir}: no model.safetensors or model.safetensors.index.json")


def _shard_name(name: object) -> bool:
    """A shard's file name, in the checkpoint's own folder (`model-00001-of-00004.safetensors`)."""
    return isinstance(name, str) and name == Path(name).name and name not in ("", ".", "..")


def _unfused(name: str, tensor: torch.Tensor, config: ModelConfig) -> list[tuple[str, torch.Tensor]]:
    """Phi-3 keeps q, k and v in one `qkv_proj` and gate and up in one `gate_up_proj`; our modules hold them apart
    (as Llama's do, which tensor parallelism and the INT4 export rely on), so the rows are split here."""
    if name.endswith("self_attn.qkv_proj.weight"):
        q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
        if tensor.shape[0] != q + 2 * kv:
            raise CheckpointError(f"{name} has {tensor.shape[0]} rows, config implies {q + 2 * kv} (q, k and v)")
        parts = zip(("q_proj", "k_proj", "v_proj"), tensor.split((q, kv, kv)), strict=True)
        return [(name.replace("qkv_proj", proj), part) for proj, part in parts]
    if name.endswith("mlp.gate_up_proj.weight"):
        gate, up = tensor.chunk(2)
        return [(name.replace("gate_up_proj", "gate_proj"), gate), (name.replace("gate_up_proj", "up_proj"), up)]
    return [(name, tensor)]


def _load_file(path: Path, config: ModelConfig, expected: dict[str, torch.Tensor], loaded: set[str]) -> None:
    with safe_open(str(path), framework="pt") as f:
        for stored in f.keys():
            if stored.endswith("rotary_emb.inv_freq"):
                continue  # older exports saved this buffer; we derive it from the config
            for name, tensor in _unfused(stored, f.get_tensor(stored), config):
                if name not in expected:
                    raise UnsupportedModelError(f"{path.name}: unexpected tensor {stored!r}")
                if tensor.shape != expected[name].shape:
                    raise CheckpointError(
                        f"{path.name}: {name} has shape {tuple(tensor.shape)}, "
                        f"config implies {tuple(expected[name].shape)}"
                    )
                expected[name].copy_(tensor)
                loaded.add(name)


def load_model(checkpoint_dir: Path, dtype: torch.dtype = torch.float32, device: str = "cpu") -> LlamaForCausalLM:
    config = read_config(checkpoint_dir)
    model = LlamaForCausalLM(config)
    expected = model.state_dict()
    loaded: set[str] = set()
    for path in weight_files(checkpoint_dir):
        try:
            _load_file(path, config, expected, loaded)
        except (SafetensorError, OSError) as exc:  # cut short by a copy or a download, or damaged since
            raise CheckpointError(
                f"{path}: not a whole safetensors file ({exc}); copy or download it again (`tandem up`'s demo "
                "model is built anew once its folder is deleted)"
            ) from None
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
        loaded.add("lm_head.weight")
    missing = sorted(set(expected) - loaded)
    if missing:
        raise CheckpointError(f"{checkpoint_dir}: missing tensors {missing[:5]}{' …' if len(missing) > 5 else ''}")
    return model.to(device=device, dtype=dtype).eval()

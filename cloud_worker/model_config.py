"""The model's shape, read from a Hugging Face config.json and checked once."""

from dataclasses import dataclass
from typing import Any

SUPPORTED_ARCHITECTURES = {"LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"}


class UnsupportedModelError(ValueError):
    """The checkpoint is not one this engine can run; the message says why."""


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    qkv_bias: bool
    tie_word_embeddings: bool
    eos_token_ids: tuple[int, ...]
    torch_dtype: str

    def __post_init__(self) -> None:
        assert self.num_attention_heads % self.num_key_value_heads == 0, "GQA needs heads % kv_heads == 0"
        assert self.head_dim % 2 == 0, "rotary embedding needs an even head_dim"

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "ModelConfig":
        architectures = hf.get("architectures") or []
        arch = next((a for a in architectures if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise UnsupportedModelError(
                f"architectures {architectures} not supported; expected one of {sorted(SUPPORTED_ARCHITECTURES)}"
            )
        if hf.get("hidden_act", "silu") != "silu":
            raise UnsupportedModelError(f"hidden_act {hf['hidden_act']!r} not supported (only silu)")
        heads = hf["num_attention_heads"]
        rope_theta, rope_scaling = _rope(hf)
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        return cls(
            architecture=arch,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            max_position_embeddings=_context_limit(arch, hf),
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            # Qwen2 always has q/k/v bias; Llama has it when attention_bias is set.
            qkv_bias=arch == "Qwen2ForCausalLM" or bool(hf.get("attention_bias", False)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            eos_token_ids=eos_ids,
            torch_dtype=hf.get("torch_dtype") or "float32",
        )


def _rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from `rope_parameters` (what transformers 5 saves) or the older `rope_theta`/`rope_scaling`.

    Never a silent default: a checkpoint whose rope settings cannot be read is an error naming them."""
    params = hf.get("rope_parameters")
    if params is None:
        return float(hf.get("rope_theta", 10000.0)), hf.get("rope_scaling")
    if not isinstance(params, dict) or "rope_theta" not in params:
        # e.g. one entry per attention type ({"full_attention": {...}, "sliding_attention": {...}})
        raise UnsupportedModelError(f"rope_parameters {params!r} not supported: expected one rope_type and rope_theta")
    kind = params.get("rope_type", "default")
    return float(params["rope_theta"]), None if kind == "default" else dict(params)


def _context_limit(arch: str, hf: dict[str, Any]) -> int:
    """The context we serve. With a sliding window, only up to the window: there full attention is exact."""
    limit = hf.get("max_position_embeddings", 2048)
    uses_window = hf.get("use_sliding_window", False) if arch == "Qwen2ForCausalLM" else True
    window = hf.get("sliding_window") if uses_window else None
    return min(limit, window) if window else limit

"""The model's shape, read from a Hugging Face config.json and checked once.

Never a silent default: a config field that changes the computation, and that
this engine does not implement, is an error naming the field, whether it is a
known one (`UNSUPPORTED`) or an unknown one whose name says it is math
(`_MATH_WORDS`: soft-capping, multipliers, qk-norm, experts …).
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def served_context(config: dict[str, Any]) -> int:
    """The context a checkpoint is served to (config.json as a dict): max_position_embeddings, or with a sliding
    window only up to the window, where full attention is exact (the engine has no sliding-window attention). The
    gateway's limit and /v1/models say the same as the worker."""
    limit = config.get("max_position_embeddings", 2048)
    qwen = any(a.startswith(("Qwen2", "Qwen3")) for a in config.get("architectures") or [])
    uses_window = config.get("use_sliding_window", False) if qwen else True  # Qwen's window is opt-in
    if "sliding_attention" in (config.get("layer_types") or ()):
        uses_window = True
    window = config.get("sliding_window") if uses_window else None
    return min(limit, window) if window else limit


SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",  # Llama with RMSNorm on each head's q and k (qk-norm)
    "Phi3ForCausalLM",  # Llama with fused qkv and gate-up weights (split when loaded: modeling/loader.py)
}
ROPE_TYPES = ("default", "linear", "llama3")  # modeling/layers/rotary.py
ROPE_NUMBERS = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                                                  "original_max_position_embeddings")}  # fmt: skip
_NEUTRAL = (None, False, 0, 0.0, 1, 1.0, "", [], {})
# Fields that change the math unless they hold a neutral value, each with the values it may hold here.
UNSUPPORTED = {
    "mlp_bias": (None, False),
    "attn_logit_softcapping": (None,),
    "final_logit_softcapping": (None,),
    "query_pre_attn_scalar": (None,),
    "use_qk_norm": (None, False),
    "qk_layernorm": (None, False),
    "partial_rotary_factor": (None, 1, 1.0),
    "attention_chunk_size": (None,),
    "no_rope_layers": (None, []),
    "no_rope_layer_interval": (None, 0),
    "use_bidirectional_attention": (None, False),
    "num_local_experts": (None, 0, 1),
    "num_experts": (None, 0, 1),
    "embedding_multiplier": (None, 1, 1.0),
    "residual_multiplier": (None, 1, 1.0),
    "logits_scaling": (None, 1, 1.0),
    "attention_multiplier": (None,),
    "scale_embedding": (None, False),
    "rope_interleave": (None, False),
}
_MATH_WORDS = re.compile(r"softcap|multiplier|qk_?norm|qk_layernorm|expert|moe|logit_scal|embed_scale|rotary_(?!emb)")
# What this module reads (the rest of a config is metadata, training-only or neutral, or caught above).
_READ = {
    "architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling",
    "rope_parameters", "attention_bias", "tie_word_embeddings", "eos_token_id", "torch_dtype", "dtype", "hidden_act",
    "sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
}  # fmt: skip


class UnsupportedModelError(ValueError):
    """The checkpoint is not one this engine can run; the message says why."""


class CheckpointError(ValueError):
    """The directory is not a loadable checkpoint; the message says what is missing or wrong."""


def read_json_object(path: Path) -> dict:
    """A checkpoint's JSON file as an object; CheckpointError naming the file where it is none."""
    try:
        value = json.loads(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: a JSON object, not {type(value).__name__}")
    return value


# What config.json's sizes may be: whole numbers from 1 to these (far past any model published; a layer count of
# 1e9 allocated until the process was killed, a review)
_SIZES = {
    "vocab_size": 1 << 24, "hidden_size": 1 << 17, "intermediate_size": 1 << 20, "num_hidden_layers": 1024,
    "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 4096, "max_position_embeddings": 1 << 24,
    "sliding_window": 1 << 24,
}  # fmt: skip
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


def _above_zero(value: object) -> bool:
    """A finite number above 0 (not a truth: JSON's `true` is no epsilon)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value < 1e300


def _check_shape(hf: dict[str, Any]) -> None:
    """config.json's sizes, each a whole number in range, and its epsilon and rope theta finite and above 0: what
    was a KeyError, a TypeError or an allocation without end is a CheckpointError naming the field (a review)."""
    for name, most in _SIZES.items():
        value = hf.get(name)
        if value is None:
            if name in _REQUIRED:
                raise CheckpointError(f"config.json has no {name}")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
            raise CheckpointError(f"config.json: {name} is {value!r}; a whole number from 1 to {most}")
    for name in ("rms_norm_eps", "rope_theta"):
        value = hf.get(name)
        if value is not None and not _above_zero(value):
            raise CheckpointError(f"config.json: {name} is {value!r}; a number above 0")
    heads, kv = hf["num_attention_heads"], hf.get("num_key_value_heads") or hf["num_attention_heads"]
    if heads % kv:
        raise CheckpointError(f"config.json: num_attention_heads {heads} is no multiple of num_key_value_heads {kv}")
    head_dim = hf.get("head_dim") or hf["hidden_size"] // heads
    if head_dim % 2 or not head_dim:
        raise CheckpointError(f"config.json: a head's size is {head_dim}; rotary embedding needs an even one")
    eos = hf.get("eos_token_id")
    if not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0
        for t in (eos if isinstance(eos, list) else [eos] if eos is not None else [])
    ):
        raise CheckpointError(f"config.json: eos_token_id is {eos!r}; a token id or a list of them")


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
    o_bias: bool = False  # HF's attention_bias also biases o_proj (Llama, Qwen3), but not Qwen2's
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k, before rotary

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
        _check_shape(hf)
        _refuse_unsupported_fields(hf)
        heads = hf["num_attention_heads"]
        rope_theta, rope_scaling = _rope(hf)
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        # attention_bias: read by HF's Llama and Qwen3 (on q, k, v and o); Mistral's and Phi-3's have none.
        attention_bias = bool(hf.get("attention_bias", False)) and arch in ("LlamaForCausalLM", "Qwen3ForCausalLM")
        return cls(
            architecture=arch,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=hf.get("num_key_value_heads") or heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
            max_position_embeddings=served_context(hf),
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            qkv_bias=arch == "Qwen2ForCausalLM" or attention_bias,  # Qwen2: always on q, k, v (never on o)
            o_bias=attention_bias,
            qk_norm=arch == "Qwen3ForCausalLM",
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            eos_token_ids=eos_ids,
            torch_dtype=hf.get("dtype") or hf.get("torch_dtype") or "float32",
        )


def _refuse_unsupported_fields(hf: dict[str, Any]) -> None:
    for name, value in hf.items():
        allowed = UNSUPPORTED.get(name) or (_NEUTRAL if _MATH_WORDS.search(name) and name not in _READ else ())
        if allowed and not any(value == a and type(value) is type(a) for a in allowed):
            raise UnsupportedModelError(
                f"config field {name}={value!r} changes the model's computation and is not supported here"
            )
    kinds = set(hf.get("layer_types") or ())
    if kinds - {"full_attention", "sliding_attention"}:
        raise UnsupportedModelError(f"config field layer_types: {sorted(kinds)} not supported (full or sliding only)")
    if "sliding_attention" in kinds and not hf.get("sliding_window"):
        raise UnsupportedModelError("config field layer_types has sliding_attention layers but no sliding_window")


def _rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from `rope_parameters` (what transformers 5 saves) or the older `rope_theta`/`rope_scaling`.

    Never a silent default: rope settings that cannot be read, or a rope type not implemented, are an error
    naming the field."""
    params = hf.get("rope_parameters")
    if params is None:
        field, theta, scaling = "rope_scaling", float(hf.get("rope_theta", 10000.0)), hf.get("rope_scaling")
    else:
        if not isinstance(params, dict) or "rope_theta" not in params:
            # e.g. one entry per attention type ({"full_attention": {...}, "sliding_attention": {...}})
            raise UnsupportedModelError(
                f"rope_parameters {params!r} not supported: expected one rope_type and rope_theta"
            )
        if params.get("partial_rotary_factor", 1.0) != 1.0:
            raise UnsupportedModelError(
                f"rope_parameters.partial_rotary_factor {params['partial_rotary_factor']!r} not supported (only 1.0)"
            )
        theta = params["rope_theta"]
        if not _above_zero(theta):
            raise CheckpointError(f"config.json: rope_parameters.rope_theta is {theta!r}; a number above 0")
        field, theta, scaling = "rope_parameters", float(theta), dict(params)
    if scaling is not None and not isinstance(scaling, dict):
        raise CheckpointError(f"config.json: {field} is {json.dumps(scaling)[:60]}; an object or null")
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"
    if kind not in ROPE_TYPES:
        raise UnsupportedModelError(f"{field}: rope_type {kind!r} not supported (one of {', '.join(ROPE_TYPES)})")
    # Each number the scaling is computed from (a review: one missing was a KeyError's traceback, a factor of 0 a
    # model whose every logit was NaN, and a llama3 scaling with equal low and high factors divides by 0)
    for key in ROPE_NUMBERS.get(kind, ()):
        if not _above_zero(scaling.get(key)):
            raise CheckpointError(f"config.json: {field}.{key} is {json.dumps(scaling.get(key))}; a number above 0")
    if kind == "llama3" and scaling["low_freq_factor"] == scaling["high_freq_factor"]:
        raise CheckpointError(f"config.json: {field}: low_freq_factor and high_freq_factor are equal; llama3 needs two")
    return theta, None if kind == "default" else scaling

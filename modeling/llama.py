"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3, Phi-3) with an explicit KV cache.

The module names mirror Hugging Face's so checkpoint tensors load by name.
Where K/V live is the caller's choice, passed in as a `KVStore`:
`forward` takes the past K/V per layer and returns the present K/V (explicit
past/present, what the ONNX export and the serial engine need);
`hidden_states` with a `PagedKV` reads and writes the paged engine's block
cache. The model code is the same for both.
"""

import torch
from torch import nn

from modeling.layers.norm import RMSNorm
from modeling.layers.rotary import RotaryEmbedding
from modeling.model_config import ModelConfig
from tandem_kernels.attention import causal_attention
from tandem_kernels.kv_write import write_kv
from tandem_kernels.paged_attention import PagedAttentionMetadata, paged_attention
from tandem_kernels.rotary import apply_rotary
from tandem_kernels.silu_and_mul import silu_and_mul

KVCache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: [batch, kv_heads, keys, head_dim]


class ContiguousKV:
    """Explicit past K/V in, present K/V collected (one tensor pair per layer)."""

    def __init__(self, past: KVCache) -> None:
        self.past, self.present = past, []

    def attend(self, layer: int, q, k, v, positions):
        past_k, past_v = self.past[layer]
        k_all, v_all = torch.cat((past_k, k), dim=2), torch.cat((past_v, v), dim=2)
        self.present.append((k_all, v_all))
        return causal_attention(q, k_all, v_all, positions)


class PagedKV:
    """The paged engine's block cache: per layer (k, v) of [kv_heads, num_blocks, block_size, head_dim].

    The step's tokens come as one flat batch ([1, heads, T, head_dim]); `meta` says
    which sequence owns which token and where its blocks are.
    """

    def __init__(self, caches: KVCache, meta: PagedAttentionMetadata) -> None:
        self.caches, self.meta = caches, meta

    def attend(self, layer: int, q, k, v, positions):
        k_cache, v_cache = self.caches[layer]
        write_kv(k_cache, v_cache, k[0].transpose(0, 1), v[0].transpose(0, 1), self.meta.slot_mapping)
        out = paged_attention(q[0].transpose(0, 1), k_cache, v_cache, self.meta)
        return out.transpose(0, 1).unsqueeze(0)


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        h, d = config.hidden_size, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, d
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=config.qkv_bias)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=config.qkv_bias)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=config.o_bias)
        if config.qk_norm:  # Qwen3: over each head's q and k, before rotary
            self.q_norm = RMSNorm(d, config.rms_norm_eps)
            self.k_norm = RMSNorm(d, config.rms_norm_eps)

    def _qk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k as [batch, tokens, heads * head_dim], each head qk-normed where the model has it."""
        q, k = self.q_proj(x), self.k_proj(x)
        if hasattr(self, "q_norm"):
            q = self.q_norm(q.view(*x.shape[:2], self.num_heads, self.head_dim)).flatten(2)
            k = self.k_norm(k.view(*x.shape[:2], self.num_kv_heads, self.head_dim)).flatten(2)
        return q, k

    def forward(self, x, cos, sin, positions, kv):
        q, k = self._qk(x)
        if getattr(kv, "fuses_rotary", False):
            # The store applies rotary with its attention (onnxruntime's GroupQueryAttention, edge_agent/export.py).
            return self.o_proj(kv.attend_projections(self.layer, q, k, self.v_proj(x)))
        batch, tokens, _ = x.shape
        q = q.view(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = kv.attend(self.layer, q, k, v, positions)
        return self.o_proj(out.transpose(1, 2).reshape(batch, tokens, -1))


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_and_mul(self.gate_proj(x), self.up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, x, cos, sin, positions, kv):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, positions, kv)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def empty_cache(self, batch: int = 1) -> KVCache:
        c = self.config
        p = self.model.norm.weight  # (the linears may be packed: no .weight)
        shape = (batch, c.num_key_value_heads, 0, c.head_dim)
        return [(p.new_zeros(shape), p.new_zeros(shape)) for _ in range(c.num_hidden_layers)]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, past: KVCache) -> tuple[torch.Tensor, KVCache]:
        """input_ids, positions: [batch, tokens]. Returns logits [batch, tokens, vocab] and the new cache."""
        kv = ContiguousKV(past)
        return self.lm_head(self.hidden_states(input_ids, positions, kv)).float(), kv.present

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor, kv) -> torch.Tensor:
        """The final-norm hidden states [batch, tokens, hidden]; K/V go through `kv`."""
        x = self.model.embed_tokens(input_ids)
        cos, sin = (None, None) if getattr(kv, "fuses_rotary", False) else self.model.rotary_emb(positions)
        for layer in self.model.layers:
            x = layer(x, cos, sin, positions, kv)
        return self.model.norm(x)

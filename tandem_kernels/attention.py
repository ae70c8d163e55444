"""Causal attention over a contiguous KV cache (GQA).

Semantics: token t of sequence b, at absolute position positions[b, t],
attends to cached keys 0 .. positions[b, t]. Keys are stored at their
absolute positions, so key index s is key position s.
"""

import torch


def causal_attention_ref(
    q: torch.Tensor,  # [batch, heads, tokens, head_dim]
    k: torch.Tensor,  # [batch, kv_heads, keys, head_dim]
    v: torch.Tensor,  # [batch, kv_heads, keys, head_dim]
    positions: torch.Tensor,  # [batch, tokens], int64
) -> torch.Tensor:
    batch, heads, tokens, head_dim = q.shape
    kv_heads = k.shape[1]
    assert heads % kv_heads == 0 and k.shape == v.shape
    # GQA by broadcasting: query head h = kv_head * group + j shares K/V head kv_head (HF's repeat_kv
    # order), with no copy of K/V per query head.
    q = q.reshape(batch, kv_heads, heads // kv_heads, tokens, head_dim)
    scores = torch.matmul(q.float(), k.float().unsqueeze(2).transpose(-1, -2)) * head_dim**-0.5
    key_positions = torch.arange(k.shape[2], device=q.device)
    allowed = key_positions.view(1, 1, 1, 1, -1) <= positions.view(batch, 1, 1, tokens, 1)
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    out = torch.matmul(probs, v.float().unsqueeze(2))
    return out.reshape(batch, heads, tokens, head_dim).to(q.dtype)


def causal_attention(q, k, v, positions):
    return causal_attention_ref(q, k, v, positions)

"""Attention that reads K/V through block tables (PagedAttention), and the
write of new K/V into the paged cache.

Layout: a layer's cache is [num_blocks, block_size, kv_heads, head_dim]; token
p of a sequence lives in block block_table[p // block_size] at offset
p % block_size. A step packs the new tokens of all its sequences into one
flat batch of T query tokens; sequence i owns queries
query_start[i] .. query_start[i + 1] and, after this step's write, has
context_lens[i] tokens in the cache, the last query_len of them new. Query j
of sequence i is at position context_lens[i] - query_len + j and attends to
keys 0 .. its position (causal).

The references below run everywhere; decode-only sequences go in one batched
gather, sequences with several new tokens (prefill chunks) one at a time.
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PagedAttentionMetadata:
    slot_mapping: torch.Tensor  # [T] int64: cache slot (block * block_size + offset) of each new token
    query_start: tuple[int, ...]  # len S + 1
    context_lens: tuple[int, ...]  # len S
    block_tables: torch.Tensor  # [S, max_blocks] int64, padded with 0
    decode_rows: torch.Tensor  # [D] int64: sequences with exactly one query token
    prefill_rows: tuple[int, ...]  # sequences with more than one query token

    @property
    def num_seqs(self) -> int:
        return len(self.context_lens)


def write_kv_ref(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor):
    """k, v: [T, kv_heads, head_dim] written to the cache slots [T]."""
    kv_heads, head_dim = k_cache.shape[2:]
    k_cache.view(-1, kv_heads, head_dim).index_copy_(0, slots, k.to(k_cache.dtype))
    v_cache.view(-1, kv_heads, head_dim).index_copy_(0, slots, v.to(v_cache.dtype))


def paged_attention_ref(
    q: torch.Tensor,  # [T, heads, head_dim]
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: PagedAttentionMetadata,
) -> torch.Tensor:
    out = torch.empty_like(q)
    if meta.decode_rows.numel():
        starts = torch.tensor(meta.query_start[:-1], device=q.device)[meta.decode_rows]
        lens = torch.tensor(meta.context_lens, device=q.device)[meta.decode_rows]
        out[starts] = _decode(q[starts], k_cache, v_cache, meta.block_tables[meta.decode_rows], lens)
    for row in meta.prefill_rows:
        start, end = meta.query_start[row], meta.query_start[row + 1]
        out[start:end] = _prefill(q[start:end], k_cache, v_cache, meta.block_tables[row], meta.context_lens[row])
    return out


def _gather(cache: torch.Tensor, block_tables: torch.Tensor, num_keys: int) -> torch.Tensor:
    """[S, num_keys, kv_heads, head_dim] for S block tables."""
    blocks = cache[block_tables]  # [S, max_blocks, block_size, kv_heads, head_dim]
    return blocks.flatten(1, 2)[:, :num_keys]


def _decode(q, k_cache, v_cache, block_tables, context_lens):
    num_seqs, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    num_keys = int(context_lens.max())
    k = _gather(k_cache, block_tables, num_keys).float().permute(0, 2, 3, 1)  # [S, kvh, d, L]
    v = _gather(v_cache, block_tables, num_keys).float().transpose(1, 2)  # [S, kvh, L, d]
    q = q.float().view(num_seqs, kv_heads, heads // kv_heads, head_dim)  # HF's repeat_kv head order
    scores = torch.matmul(q, k) * head_dim**-0.5  # [S, kvh, group, L]
    past_end = torch.arange(num_keys, device=q.device).view(1, 1, 1, -1) >= context_lens.view(-1, 1, 1, 1)
    probs = torch.softmax(scores.masked_fill(past_end, float("-inf")), dim=-1)
    return torch.matmul(probs, v).reshape(num_seqs, heads, head_dim).to(k_cache.dtype)


def _prefill(q, k_cache, v_cache, block_table, context_len):
    tokens, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    k = _gather(k_cache, block_table.unsqueeze(0), context_len)[0].float().permute(1, 2, 0)  # [kvh, d, L]
    v = _gather(v_cache, block_table.unsqueeze(0), context_len)[0].float().transpose(0, 1)  # [kvh, L, d]
    k, v = k.unsqueeze(1), v.unsqueeze(1)  # broadcast over the query heads of a group
    q = q.float().transpose(0, 1).reshape(kv_heads, heads // kv_heads, tokens, head_dim)
    scores = torch.matmul(q, k) * head_dim**-0.5  # [kvh, group, tokens, L]
    positions = torch.arange(context_len - tokens, context_len, device=q.device)
    future = torch.arange(context_len, device=q.device).view(1, -1) > positions.view(-1, 1)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    out = torch.matmul(probs, v)  # [kvh, group, tokens, d]
    return out.reshape(heads, tokens, head_dim).transpose(0, 1).to(k_cache.dtype)


def paged_attention(q, k_cache, v_cache, meta):
    return paged_attention_ref(q, k_cache, v_cache, meta)


def write_kv(k_cache, v_cache, k, v, slots):
    write_kv_ref(k_cache, v_cache, k, v, slots)

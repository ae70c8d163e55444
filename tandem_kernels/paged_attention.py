"""Attention that reads K/V through block tables (PagedAttention), and the
write of new K/V into the paged cache.

Layout: a layer's cache is [kv_heads, num_blocks, block_size, head_dim]; token
p of a sequence lives in block block_table[p // block_size] at offset
p % block_size. KV heads outermost means one index gathers a sequence's keys
of each head as a contiguous [keys, head_dim] matrix, ready for the matmul
without a transposing copy. A step packs the new tokens of all its sequences into one
flat batch of T query tokens; sequence i owns queries
query_start[i] .. query_start[i + 1] and, after this step's write, has
context_lens[i] tokens in the cache, the last query_len of them new. Query j
of sequence i is at position context_lens[i] - query_len + j and attends to
keys 0 .. its position (causal). The new K/V are written first (kv_write.py).

The references below run everywhere; decode-only sequences go in one batched
gather, sequences with several new tokens (prefill chunks) one at a time.
"""

import functools
import os
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from tandem_kernels import cpu_extension
from tandem_kernels.dispatch import check, triton_refuses, use_triton

DECODE_GROUP_SEQS = 16
PREFILL_TILE = 16  # query tokens per program of the prefill kernel


@dataclass(frozen=True)
class PagedAttentionMetadata:
    """One step's attention layout, built once per step (`build`) and read by every layer."""

    slot_mapping: torch.Tensor  # [T] int64: cache slot (block * block_size + offset) of each new token
    query_start: tuple[int, ...]  # len S + 1
    context_lens: tuple[int, ...]  # len S
    lens: torch.Tensor  # [S] int64: context_lens on the device
    block_tables: torch.Tensor  # [S, max_blocks] int64, padded with 0
    # Sequences with exactly one query token, shortest context first (so groups pad little):
    decode_starts: torch.Tensor  # [D] flat index of each one's query token
    decode_lens: torch.Tensor  # [D] its context length
    decode_tables: torch.Tensor  # [D, max_blocks] its block table
    prefill_rows: tuple[int, ...]  # sequences with more than one query token
    # The prefill kernel's work list, one row per PREFILL_TILE query tokens of a prefill sequence:
    # (sequence, first query's flat index, one past the last, first query's position).
    prefill_tiles: torch.Tensor  # [tiles, 4] int64

    @classmethod
    def build(cls, slot_mapping: torch.Tensor, query_start, context_lens, block_tables: torch.Tensor):
        rows = range(len(context_lens))
        decode = sorted((i for i in rows if query_start[i + 1] - query_start[i] == 1), key=lambda i: context_lens[i])
        return cls(
            slot_mapping=slot_mapping,
            query_start=tuple(query_start),
            context_lens=tuple(context_lens),
            lens=torch.tensor(list(context_lens), dtype=torch.int64),
            block_tables=block_tables,
            decode_starts=torch.tensor([query_start[i] for i in decode], dtype=torch.int64),
            decode_lens=torch.tensor([context_lens[i] for i in decode], dtype=torch.int64),
            decode_tables=block_tables[torch.tensor(decode, dtype=torch.int64)],
            prefill_rows=tuple(i for i in rows if query_start[i + 1] - query_start[i] > 1),
            prefill_tiles=_prefill_tiles(query_start, context_lens),
        )

    def to(self, device) -> "PagedAttentionMetadata":
        tensors = (
            "slot_mapping",
            "lens",
            "block_tables",
            "decode_starts",
            "decode_lens",
            "decode_tables",
            "prefill_tiles",
        )
        return replace(self, **{name: getattr(self, name).to(device) for name in tensors})


def _prefill_tiles(query_start, context_lens) -> torch.Tensor:
    tiles = []
    for i, context in enumerate(context_lens):
        start, end = query_start[i], query_start[i + 1]
        if end - start > 1:
            first_position = context - (end - start)
            tiles += [
                (i, t, min(t + PREFILL_TILE, end), first_position + t - start) for t in range(start, end, PREFILL_TILE)
            ]
    return torch.tensor(tiles, dtype=torch.int64).view(-1, 4)


def paged_attention_ref(
    q: torch.Tensor,  # [T, heads, head_dim]
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: PagedAttentionMetadata,
) -> torch.Tensor:
    out = _prefill_rows_ref(q, k_cache, v_cache, meta)
    if meta.decode_starts.numel():
        # Decodes run in groups of similar context length, so padding to a group's longest stays small.
        decodes = (meta.decode_starts, meta.decode_lens, meta.decode_tables)
        for starts, lens, tables in zip(*(t.split(DECODE_GROUP_SEQS) for t in decodes), strict=True):
            out[starts] = _decode(q[starts], k_cache, v_cache, tables, lens)
    return out


def _prefill_rows_ref(q, k_cache, v_cache, meta: PagedAttentionMetadata) -> torch.Tensor:
    """An output [T, heads, head_dim] with the prefill rows attended (reference); decode rows left unwritten."""
    out = torch.empty_like(q)
    for row in meta.prefill_rows:
        start, end = meta.query_start[row], meta.query_start[row + 1]
        out[start:end] = _prefill(q[start:end], k_cache, v_cache, meta.block_tables[row], meta.context_lens[row])
    return out


def _gather(cache: torch.Tensor, block_tables: torch.Tensor, num_keys: int) -> torch.Tensor:
    """[kv_heads, S, num_keys, head_dim] for S block tables [S, max_blocks]."""
    kv_heads, _, block_size, head_dim = cache.shape
    num_seqs, max_blocks = block_tables.shape
    blocks = torch.index_select(cache.flatten(2), 1, block_tables.flatten())  # one copy
    return blocks.view(kv_heads, num_seqs, max_blocks * block_size, head_dim)[:, :, :num_keys]


def _decode(q, k_cache, v_cache, block_tables, context_lens):
    num_seqs, heads, head_dim = q.shape
    kv_heads = k_cache.shape[0]
    num_keys = int(context_lens.max())
    k = _gather(k_cache, block_tables, num_keys).float()  # [kvh, S, L, d]
    v = _gather(v_cache, block_tables, num_keys).float()
    # Query head h = kv_head * group + j (HF's repeat_kv order): [S, kvh, group, d] -> [kvh, S, group, d].
    q = q.float().view(num_seqs, kv_heads, heads // kv_heads, head_dim).transpose(0, 1)
    within = torch.arange(num_keys, device=q.device).view(1, 1, 1, -1) < context_lens.view(1, -1, 1, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=within)  # [kvh, S, group, d], fused on CPU too
    return out.transpose(0, 1).reshape(num_seqs, heads, head_dim).to(k_cache.dtype)


def _prefill(q, k_cache, v_cache, block_table, context_len):
    tokens = q.shape[0]
    # [1, kvh, L, d] and [1, heads, tokens, d] with enable_gqa (HF's repeat_kv order): on CPU this is the
    # shape SDPA's fused flash kernel takes; a broadcast group dimension sends it to the 3x slower math path.
    k = _gather(k_cache, block_table.unsqueeze(0), context_len).float().transpose(0, 1)
    v = _gather(v_cache, block_table.unsqueeze(0), context_len).float().transpose(0, 1)
    q = q.float().transpose(0, 1).unsqueeze(0)
    if context_len == tokens:  # a whole prompt: plain causal
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        positions = torch.arange(context_len - tokens, context_len, device=q.device)
        past = torch.arange(context_len, device=q.device).view(1, -1) <= positions.view(-1, 1)  # causal, offset
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=past, enable_gqa=True)  # [1, heads, tokens, d]
    return out[0].transpose(0, 1).to(k_cache.dtype)


SPLIT_KEYS = 2048  # split-K: at least one partial per this many keys of the longest context
MIN_SPLIT_KEYS = 256  # ... and, to fill the GPU when few sequences decode, splits down to this many keys
MAX_SPLITS = 64


@functools.cache
def _decode_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def paged_decode_kernel(
        q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, out_ptr, part_ptr, stats_ptr,
        stride_q_seq, stride_q_head, stride_kv_head, stride_kv_block, stride_kv_slot, stride_table, scale,
        num_splits, num_heads, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr,
        HEAD_DIM: tl.constexpr, SPLIT: tl.constexpr, KEYS: tl.constexpr, DOT: tl.constexpr,
    ):  # fmt: skip
        """One program per (sequence, KV head, split): the GROUP query heads sharing the KV head together.

        Each step reads KEYS keys (KEYS // BLOCK_SIZE cache blocks, gathered through the block table) once for
        all of them ([GROUP, d] x [d, KEYS] on the tensor cores; rows past GROUP are padding up to tl.dot's
        minimum), with an online softmax per query head. Several blocks per step keep several loads in flight:
        one 16-token block per step left a short context's walk bound by load latency. Without SPLIT the one
        split is the whole context and the program writes the output; with SPLIT it writes its unnormalised
        partials and (max, sum) for paged_decode_combine_kernel.
        """
        seq, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        rows = tl.arange(0, GROUP_PAD)
        row_valid = rows < GROUP
        heads = kv_head * GROUP + rows
        dims = tl.arange(0, HEAD_DIM)
        keys = tl.arange(0, KEYS)
        q_offsets = seq * stride_q_seq + heads[:, None] * stride_q_head + dims[None, :]
        q = tl.load(q_ptr + q_offsets, mask=row_valid[:, None], other=0.0)
        context = tl.load(lens_ptr + seq)
        num_blocks = tl.cdiv(context, BLOCK_SIZE)
        per_split = tl.cdiv(num_blocks, num_splits)
        first = split * per_split * BLOCK_SIZE  # this split's first key ...
        end = tl.minimum((split + 1) * per_split * BLOCK_SIZE, context)  # ... and one past its last
        m = tl.full((GROUP_PAD,), float("-inf"), tl.float32)
        total = tl.zeros((GROUP_PAD,), tl.float32)
        acc = tl.zeros((GROUP_PAD, HEAD_DIM), tl.float32)
        for start in range(first, end, KEYS):
            pos = start + keys
            valid = pos < end
            block = tl.load(tables_ptr + seq * stride_table + pos // BLOCK_SIZE, mask=valid, other=0)
            offsets = (kv_head * stride_kv_head + block[:, None] * stride_kv_block
                       + (pos % BLOCK_SIZE)[:, None] * stride_kv_slot + dims[None, :])  # fmt: skip
            k = tl.load(k_ptr + offsets, mask=valid[:, None], other=0.0)
            v = tl.load(v_ptr + offsets, mask=valid[:, None], other=0.0)
            scores = tl.dot(q, tl.trans(k), input_precision=DOT).to(tl.float32) * scale  # [GROUP_PAD, KEYS]
            scores = tl.where(valid[None, :], scores, float("-inf"))
            m_new = tl.maximum(m, tl.max(scores, axis=1))
            p = tl.exp(scores - m_new[:, None])
            correction = tl.exp(m - m_new)
            total = total * correction + tl.sum(p, axis=1)
            acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT).to(tl.float32)
            m = m_new
        if SPLIT:
            part_rows = (seq * num_heads + heads) * num_splits + split
            tl.store(part_ptr + part_rows[:, None] * HEAD_DIM + dims[None, :], acc, mask=row_valid[:, None])
            tl.store(stats_ptr + part_rows * 2, m, mask=row_valid)
            tl.store(stats_ptr + part_rows * 2 + 1, total, mask=row_valid)
        else:
            out = acc / total[:, None]
            tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])

    @triton.jit
    def paged_decode_combine_kernel(
        part_ptr, stats_ptr, out_ptr, stride_q_seq, stride_q_head, num_splits, HEAD_DIM: tl.constexpr
    ):
        """One program per (sequence, query head): rescale the splits' partials to their common maximum."""
        seq, head = tl.program_id(0), tl.program_id(1)
        dims = tl.arange(0, HEAD_DIM)
        rows = (seq * tl.num_programs(1) + head) * num_splits
        m = tl.full((), float("-inf"), tl.float32)
        for i in range(0, num_splits):
            m = tl.maximum(m, tl.load(stats_ptr + (rows + i) * 2))
        total = tl.zeros((), tl.float32)
        acc = tl.zeros((HEAD_DIM,), tl.float32)
        for i in range(0, num_splits):
            weight = tl.exp(tl.load(stats_ptr + (rows + i) * 2) - m)  # 0 for a split with no keys (max -inf)
            total += weight * tl.load(stats_ptr + (rows + i) * 2 + 1)
            acc += weight * tl.load(part_ptr + (rows + i) * HEAD_DIM + dims)
        tl.store(out_ptr + seq * stride_q_seq + head * stride_q_head + dims, (acc / total).to(out_ptr.dtype.element_ty))

    return paged_decode_kernel, paged_decode_combine_kernel


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def dot_precision(q: torch.Tensor) -> str | None:
    """tl.dot's input_precision: "ieee" for an fp32 model, whose scores TF32 (Triton's default for fp32 on NVIDIA)
    rounds to 10 bits of mantissa (on an H100, fp32 greedy tokens left HF's fp32 ones after 84 % of them; 100 % with
    ieee); Triton's default otherwise (TF32 on NVIDIA: the prefill's fp32 copies of bf16/fp16 values are exact in it,
    and it keeps the tensor cores; not named, since some AMD GPUs take no "tf32")."""
    return "ieee" if q.dtype == torch.float32 else None


def decode_splits(max_context: int, programs: int = 1, multiprocessors: int | None = None) -> int:
    """Splits of each context for split-K: one per SPLIT_KEYS keys, so that no program walks a long context
    alone, and, on a GPU of `multiprocessors` SMs where `programs` (sequences x KV heads) would leave most of them
    idle, more, down to MIN_SPLIT_KEYS keys each, until about two programs per SM run (one sequence of 32k
    tokens over 8 KV heads was 8 x 16 programs on 132 SMs: 0.8 TB/s of the H200's 4.2)."""
    splits = -(-max_context // SPLIT_KEYS)
    if multiprocessors:
        splits = max(splits, min(-(-2 * multiprocessors // programs), -(-max_context // MIN_SPLIT_KEYS)))
    return max(1, min(MAX_SPLITS, splits))


@functools.cache
def _multiprocessors(device: torch.device) -> int | None:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None


def decode_keys(block_size: int, head_dim: int) -> int:
    """Keys one decode step reads: 16 KB of K (64 keys of 128 dims in bf16) up to 128 keys, whole blocks."""
    return max(block_size, min(128, 8192 // head_dim) // block_size * block_size)


def paged_decode_triton(q, k_cache, v_cache, block_tables, context_lens, num_splits: int | None = None):
    """q [S, heads, head_dim] (one query token per sequence) -> [S, heads, head_dim]."""
    import triton

    num_seqs, heads, head_dim = q.shape
    kv_heads, _, block_size, cache_dim = k_cache.shape
    check(k_cache.shape == v_cache.shape, "k_cache and v_cache must have one shape")
    check(cache_dim == head_dim, f"cache head_dim {cache_dim} != query head_dim {head_dim}")
    check(heads % kv_heads == 0, f"{heads} query heads do not group over {kv_heads} KV heads")
    check(head_dim & (head_dim - 1) == 0 and block_size & (block_size - 1) == 0, "head_dim and block size: powers of 2")
    check(q.stride(-1) == 1 and k_cache.is_contiguous() and v_cache.is_contiguous(), "last dims must be contiguous")
    check(block_tables.dtype == torch.int64 and context_lens.dtype == torch.int64, "tables and lengths: int64")
    check(block_tables.shape[0] == num_seqs == context_lens.shape[0], "one block table and length per sequence")
    check(block_size >= 16 or _interpreted(), "block size >= 16 (tl.dot's minimum) on a GPU")
    if num_splits is None:
        num_splits = decode_splits(block_tables.shape[1] * block_size, num_seqs * kv_heads, _multiprocessors(q.device))
    check(num_splits >= 1, "num_splits >= 1")
    out = torch.empty_like(q)
    block_tables = block_tables.contiguous()
    split = num_splits > 1
    part = torch.empty(num_seqs * heads * num_splits * head_dim if split else 1, device=q.device, dtype=torch.float32)
    stats = torch.empty(num_seqs * heads * num_splits * 2 if split else 1, device=q.device, dtype=torch.float32)
    attend, combine = _decode_kernel()
    group = heads // kv_heads
    attend[(num_seqs, kv_heads, num_splits)](
        q, k_cache, v_cache, block_tables, context_lens, out, part, stats,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        head_dim**-0.5, num_splits, heads, GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)),
        BLOCK_SIZE=block_size, HEAD_DIM=head_dim, SPLIT=split, KEYS=decode_keys(block_size, head_dim),
        DOT=dot_precision(q),
    )  # fmt: skip
    if split:
        combine[(num_seqs, heads)](part, stats, out, q.stride(0), q.stride(1), num_splits, HEAD_DIM=head_dim)
    return out


@functools.cache
def _prefill_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def paged_prefill_kernel(
        q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, tiles_ptr, out_ptr,
        stride_q_tok, stride_q_head, stride_kv_head, stride_kv_block, stride_kv_slot, stride_table, scale,
        GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, TILE: tl.constexpr, DOT: tl.constexpr,
    ):  # fmt: skip
        """One program per (tile of a sequence's new tokens, query head): causal attention over its blocks.

        The tile's queries sit at positions first .. first + n - 1; the keys before them may come from the
        prefix cache or earlier chunks, the rest were just written. Online softmax over the blocks.
        """
        tile, head = tl.program_id(0), tl.program_id(1)
        seq = tl.load(tiles_ptr + tile * 4)
        q_begin = tl.load(tiles_ptr + tile * 4 + 1)
        q_end = tl.load(tiles_ptr + tile * 4 + 2)
        first = tl.load(tiles_ptr + tile * 4 + 3)
        kv_head = head // GROUP
        rows = tl.arange(0, TILE)
        dims = tl.arange(0, HEAD_DIM)
        slots = tl.arange(0, BLOCK_SIZE)
        row_valid = q_begin + rows < q_end
        q_offsets = (q_begin + rows)[:, None] * stride_q_tok + head * stride_q_head + dims[None, :]
        q = tl.load(q_ptr + q_offsets, mask=row_valid[:, None], other=0.0).to(tl.float32)
        positions = first + rows
        context = tl.load(lens_ptr + seq)
        m = tl.full((TILE,), float("-inf"), tl.float32)
        total = tl.zeros((TILE,), tl.float32)
        acc = tl.zeros((TILE, HEAD_DIM), tl.float32)
        last_key = tl.minimum(first + (q_end - q_begin), context)  # keys past the tile's last query are masked
        for b in range(0, tl.cdiv(last_key, BLOCK_SIZE)):
            block = tl.load(tables_ptr + seq * stride_table + b)
            offsets = (
                kv_head * stride_kv_head + block * stride_kv_block + slots[:, None] * stride_kv_slot + dims[None, :]
            )
            key_positions = b * BLOCK_SIZE + slots
            k = tl.load(k_ptr + offsets, mask=(key_positions < context)[:, None], other=0.0).to(tl.float32)
            v = tl.load(v_ptr + offsets, mask=(key_positions < context)[:, None], other=0.0).to(tl.float32)
            scores = tl.dot(q, tl.trans(k), input_precision=DOT) * scale  # [TILE, BLOCK_SIZE]
            allowed = (key_positions[None, :] <= positions[:, None]) & (key_positions[None, :] < context)
            scores = tl.where(allowed, scores, float("-inf"))
            m_new = tl.maximum(m, tl.max(scores, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # padded rows see no key at all
            p = tl.exp(scores - m_safe[:, None])
            correction = tl.exp(m - m_safe)
            total = total * correction + tl.sum(p, axis=1)
            acc = acc * correction[:, None] + tl.dot(p, v, input_precision=DOT)
            m = m_new
        out = acc / tl.where(total > 0, total, 1.0)[:, None]
        tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])

    return paged_prefill_kernel


def paged_prefill_triton(q, k_cache, v_cache, block_tables, context_lens, tiles):
    """q [T, heads, head_dim] -> out [T, heads, head_dim] for the tokens `tiles` (PagedAttentionMetadata) cover.

    Rows of the output that no tile covers are left unwritten (they are the decodes').
    """
    _, heads, head_dim = q.shape
    kv_heads, _, block_size, cache_dim = k_cache.shape
    check(k_cache.shape == v_cache.shape and cache_dim == head_dim, "caches: one shape, the queries' head_dim")
    check(heads % kv_heads == 0, f"{heads} query heads do not group over {kv_heads} KV heads")
    check(head_dim >= 16 and block_size >= 16, "tl.dot needs head_dim and block size of at least 16")
    check(head_dim & (head_dim - 1) == 0 and block_size & (block_size - 1) == 0, "head_dim and block size: powers of 2")
    check(q.stride(-1) == 1 and k_cache.is_contiguous() and v_cache.is_contiguous(), "last dims must be contiguous")
    check(tiles.dtype == torch.int64 and tiles.dim() == 2 and tiles.shape[1] == 4, "tiles: [n, 4] int64")
    check(block_tables.dtype == torch.int64 and context_lens.dtype == torch.int64, "tables and lengths: int64")
    out = torch.empty_like(q)
    block_tables = block_tables.contiguous()
    _prefill_kernel()[(tiles.shape[0], heads)](
        q, k_cache, v_cache, block_tables, context_lens, tiles.contiguous(), out,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        head_dim**-0.5, GROUP=heads // kv_heads, BLOCK_SIZE=block_size, HEAD_DIM=head_dim, TILE=PREFILL_TILE,
        DOT=dot_precision(q),
    )  # fmt: skip
    return out


def paged_attention(q, k_cache, v_cache, meta):
    if not use_triton(q):
        return _paged_attention_cpu(q, k_cache, v_cache, meta)
    head_dim, block_size = q.shape[-1], k_cache.shape[2]
    if triton_refuses(head_dim, block_size):  # (the worker said so once, at start: cloud_worker/build.py)
        return paged_attention_ref(q, k_cache, v_cache, meta)
    if meta.prefill_rows and (head_dim < 16 or block_size < 16):
        # Shapes tl.dot cannot take (tiny test models): prefill chunks take the reference.
        out = _prefill_rows_ref(q, k_cache, v_cache, meta)
    elif meta.prefill_rows:
        out = paged_prefill_triton(q, k_cache, v_cache, meta.block_tables, meta.lens, meta.prefill_tiles)
    else:
        out = torch.empty_like(q)
    starts = meta.decode_starts
    if starts.numel():
        out[starts] = paged_decode_triton(q[starts], k_cache, v_cache, meta.decode_tables, meta.decode_lens)
    return out


def _paged_attention_cpu(q, k_cache, v_cache, meta):
    """Decodes through the C++ kernel (K/V read in place, tandem_kernels/csrc/) where it is built; the rest the reference."""
    ext = cpu_extension.extension() if q.device.type == "cpu" and q.dtype == k_cache.dtype == torch.float32 else None
    if ext is None or not meta.decode_starts.numel():
        return paged_attention_ref(q, k_cache, v_cache, meta)
    out = _prefill_rows_ref(q, k_cache, v_cache, meta)
    starts = meta.decode_starts
    out[starts] = ext.paged_decode(
        q[starts].contiguous(), k_cache, v_cache, meta.decode_tables, meta.decode_lens, q.shape[-1] ** -0.5
    )
    return out

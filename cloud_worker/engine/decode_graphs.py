"""Decode steps replayed from CUDA graphs, one captured per batch-size bucket.

A decode-only step launches a few hundred small kernels whose launch cost,
on a GPU, rivals their work. Captured once as a CUDA graph, the whole
forward pass is one launch. A graph replays fixed addresses and shapes, so
each bucket (1, 2, 4, … up to max_num_seqs sequences) owns static input
tensors: token ids, positions, K/V slots, context lengths and block tables as
wide as the longest context. A step with n sequences copies its inputs into
the first n rows of the next bucket up. The padding rows decode token 0 at
position 0 into a scratch slot: the pool's last block, which the block
manager never hands out. They attend to that one slot, and their logits
are dropped. Sampling runs after the graph, on the real rows.

Steps with a prefill chunk, more sequences than the largest bucket, or a
context past the tables' width run eagerly, as before. `mode="eager"` runs
the same padding and static tensors without capturing, which is how the
tests check all of this on CPU. Under tensor parallelism the graphs are off:
the other ranks would have to replay in lockstep.
"""

from dataclasses import dataclass
from typing import Literal

import torch

from modeling.llama import KVCache, LlamaForCausalLM, PagedKV
from tandem_kernels.paged_attention import PagedAttentionMetadata

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
Mode = Literal["capture", "eager"]


@dataclass
class _Bucket:
    size: int
    input_ids: torch.Tensor  # [B]
    positions: torch.Tensor  # [B]
    meta: PagedAttentionMetadata  # decode-only, over the static tensors below
    graph: "torch.cuda.CUDAGraph | None" = None
    logits: torch.Tensor | None = None  # [B, vocab], written by each replay


class DecodeGraphs:
    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_caches: KVCache,
        block_size_tokens: int,
        max_context_tokens: int,
        max_num_seqs: int,
        scratch_block: int,
        mode: Mode,
    ) -> None:
        self.model, self.kv_caches = model, kv_caches
        self.width = -(-max_context_tokens // block_size_tokens)  # block-table columns
        self.scratch_block, self.scratch_slot = scratch_block, scratch_block * block_size_tokens
        device = model.model.layers[0].input_layernorm.weight.device
        sizes = [b for b in BUCKETS if b < max_num_seqs] + [max_num_seqs]
        self.buckets = [self._static(size, device) for size in sorted(set(sizes))]
        self.num_replays = 0
        if mode == "capture":
            pool = None
            for bucket in reversed(self.buckets):  # largest first: the smaller graphs reuse its memory pool
                pool = self._capture(bucket, pool)

    def _static(self, size: int, device) -> _Bucket:
        def zeros(*shape):
            return torch.zeros(*shape, dtype=torch.int64, device=device)

        tables = zeros(size, self.width)
        lens = zeros(size)
        meta = PagedAttentionMetadata(
            slot_mapping=zeros(size),
            query_start=tuple(range(size + 1)),
            context_lens=(1,) * size,  # read only for prefill rows, and there are none
            lens=lens,
            block_tables=tables,
            decode_starts=torch.arange(size, device=device),
            decode_lens=lens,
            decode_tables=tables,
            prefill_rows=(),
            prefill_tiles=zeros(0, 4),
        )
        return _Bucket(size, zeros(size), zeros(size), meta)

    def bucket_for(self, num_seqs: int, table_width: int, all_decode: bool) -> _Bucket | None:
        if not all_decode or table_width > self.width:
            return None
        return next((b for b in self.buckets if b.size >= num_seqs), None)

    @torch.inference_mode()
    def run(self, bucket: _Bucket, input_ids, positions, slots, context_lens, block_tables) -> torch.Tensor:
        """Logits [n, vocab] for n decoding sequences (inputs on the model's device)."""
        n, width = block_tables.shape
        meta = bucket.meta
        self._pad(bucket, n)
        bucket.input_ids[:n] = input_ids
        bucket.positions[:n] = positions
        meta.slot_mapping[:n] = slots
        meta.lens[:n] = context_lens
        meta.block_tables[:n, :width] = block_tables
        if bucket.graph is not None:
            bucket.graph.replay()
            logits = bucket.logits
        else:
            logits = self._forward(bucket)
        self.num_replays += 1
        return logits[:n]

    def _pad(self, bucket: _Bucket, first: int) -> None:
        """Rows from `first` on become padding: token 0 at position 0, one key, in the scratch slot."""
        meta = bucket.meta
        bucket.input_ids[first:] = 0
        bucket.positions[first:] = 0
        meta.slot_mapping[first:] = self.scratch_slot
        meta.lens[first:] = 1
        meta.block_tables[first:, 0] = self.scratch_block

    def _forward(self, bucket: _Bucket) -> torch.Tensor:
        kv = PagedKV(self.kv_caches, bucket.meta)
        hidden = self.model.hidden_states(bucket.input_ids.unsqueeze(0), bucket.positions.unsqueeze(0), kv)
        return self.model.lm_head(hidden[0]).float()

    @torch.inference_mode()
    def _capture(self, bucket: _Bucket, pool):
        self._pad(bucket, 0)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up (Triton compiles here, never inside the capture)
            for _ in range(2):
                self._forward(bucket)
        torch.cuda.current_stream().wait_stream(side)
        bucket.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(bucket.graph, pool=pool):
            bucket.logits = self._forward(bucket)
        return bucket.graph.pool()

"""Turns a scheduled step into tensors, runs the model over the paged KV cache, samples.

One step packs the new tokens of every scheduled sequence into one flat batch
(prefill chunks and decodes together), so all linear layers run once per
step. Logits are computed only for the last token of sequences that sample.
Under tensor parallelism every rank runs `forward` on the same `StepInputs`
(rank 0 broadcasts them); only rank 0 samples.
"""

from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from cloud_worker.engine.decode_graphs import DecodeGraphs, Mode
from cloud_worker.engine.sampler import SamplingBatch, sample
from cloud_worker.engine.scheduler import ScheduledSeq
from cloud_worker.engine.sequence import Sequence
from modeling.llama import KVCache, LlamaForCausalLM, PagedKV
from serving.logits_processors import apply_penalties, mask_logits, score
from tandem_kernels.paged_attention import PagedAttentionMetadata

if TYPE_CHECKING:
    from cloud_worker.parallel.ranks import TensorParallelPeers


@dataclass(frozen=True)
class StepInputs:
    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T]
    meta: PagedAttentionMetadata
    sample_indices: torch.Tensor  # [N]: the flat index of each sampling sequence's last token

    def to(self, device: torch.device) -> "StepInputs":
        if device.type == "cpu":
            return self  # built on the CPU already
        return StepInputs(
            self.input_ids.to(device), self.positions.to(device), self.meta.to(device), self.sample_indices.to(device)
        )


def _prompt_positions(scheduled: list[ScheduledSeq]) -> list[tuple[int, Sequence, int]]:
    """(flat token index, sequence, prompt position p) for every position whose logits score prompt token p + 1
    and that no earlier step scored (a preempted sequence recomputes its prompt: scored once)."""
    out, offset = [], 0
    for item in scheduled:
        seq, start = item.seq, item.seq.num_computed_tokens
        if seq.request.sampling.prompt_logprobs is not None:
            for p in range(
                max(start, len(seq.prompt_scores)), min(start + item.num_new_tokens, seq.num_prompt_tokens - 1)
            ):
                out.append((offset + p - start, seq, p))
        offset += item.num_new_tokens
    return out


def _score_prompts(logits: torch.Tensor, scored: list[tuple[int, Sequence, int]]) -> None:
    """Every scored position in one batch; each sequence keeps its prompt's scores in order."""
    targets = [seq.token_ids[p + 1] for _, seq, p in scored]
    chosen, tops = score(logits, targets, [seq.request.sampling.prompt_logprobs for _, seq, _ in scored])
    for (_, seq, _), lp, top in zip(scored, chosen, tops, strict=True):
        seq.prompt_scores.append((lp, top))


def allocate_kv_cache(model: LlamaForCausalLM, num_blocks: int, block_size_tokens: int) -> KVCache:
    attn = model.model.layers[0].self_attn
    weight = model.model.layers[0].input_layernorm.weight
    shape = (attn.num_kv_heads, num_blocks, block_size_tokens, attn.head_dim)  # see tandem_kernels/paged_attention.py
    return [(weight.new_zeros(shape), weight.new_zeros(shape)) for _ in model.model.layers]


def prepare_inputs(scheduled: list[ScheduledSeq], block_size_tokens: int) -> StepInputs:
    input_ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    query_start, context_lens, sample_indices = [0], [], []
    for item in scheduled:
        seq, start = item.seq, item.seq.num_computed_tokens
        end = start + item.num_new_tokens
        input_ids += seq.token_ids[start:end]
        positions += range(start, end)
        table = seq.block_table
        if end - start == 1:
            slots.append(table[start // block_size_tokens] * block_size_tokens + start % block_size_tokens)
        else:
            slots += [
                table[p // block_size_tokens] * block_size_tokens + p % block_size_tokens for p in range(start, end)
            ]
        query_start.append(query_start[-1] + item.num_new_tokens)
        context_lens.append(end)
        if item.is_sampling:
            sample_indices.append(query_start[-1] - 1)
    max_blocks = max(len(item.seq.block_table) for item in scheduled)
    tables: list[int] = []
    for item in scheduled:
        tables += item.seq.block_table
        tables += [0] * (max_blocks - len(item.seq.block_table))
    meta = PagedAttentionMetadata.build(
        _int64(slots), query_start, context_lens, _int64(tables).view(len(scheduled), max_blocks)
    )
    return StepInputs(_int64(input_ids), _int64(positions), meta, _int64(sample_indices))


def _int64(values: list[int]) -> torch.Tensor:
    """A list of ints as an int64 tensor, through array's C loop (torch.tensor on a list is slower per element)."""
    if not values:
        return torch.empty(0, dtype=torch.int64)
    return torch.frombuffer(array("q", values), dtype=torch.int64)


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        num_blocks: int,
        block_size_tokens: int,
        peers: "TensorParallelPeers | None" = None,
        decode_graphs: Mode | None = None,
        max_context_tokens: int = 0,
        max_num_seqs: int = 0,
    ) -> None:
        self.model = model
        self.block_size_tokens = block_size_tokens
        # With decode graphs, one block more than the block manager knows of: the padding rows' scratch block.
        self.kv_caches = allocate_kv_cache(model, num_blocks + (decode_graphs is not None), block_size_tokens)
        self.device = model.model.layers[0].input_layernorm.weight.device
        self._peers = peers  # tensor parallelism: the other ranks, which run every step too
        self.graphs = None
        if decode_graphs is not None and peers is None:
            self.graphs = DecodeGraphs(
                model, self.kv_caches, block_size_tokens, max_context_tokens, max_num_seqs, num_blocks, decode_graphs
            )

    @torch.inference_mode()
    def forward(self, inputs: StepInputs, extra_indices: list[int] | None = None) -> torch.Tensor:
        """Logits [N (+ extra), vocab] for the sampling sequences (then for the flat token indices in
        `extra_indices`: prompt positions to score); writes every new token's K/V."""
        inputs = inputs.to(self.device)
        kv = PagedKV(self.kv_caches, inputs.meta)
        hidden = self.model.hidden_states(inputs.input_ids.unsqueeze(0), inputs.positions.unsqueeze(0), kv)
        rows = inputs.sample_indices
        if extra_indices:
            rows = torch.cat([rows, torch.tensor(extra_indices, dtype=rows.dtype, device=rows.device)])
        return self.model.lm_head(hidden[0, rows]).float()

    def run(self, scheduled: list[ScheduledSeq]) -> tuple[list[int], list[float], list[tuple]]:
        """Token, its log-probability and the top alternatives asked for, per sampling sequence in scheduled order.

        Penalties and biases (serving/logits_processors.py) shape what is sampled; the log-probabilities are the
        raw logits'."""
        inputs = prepare_inputs(scheduled, self.block_size_tokens)
        scored = _prompt_positions(scheduled)
        if self._peers is not None:
            self._peers.send((inputs, [index for index, _, _ in scored]))
        logits = None if scored else self._replay(inputs)
        if logits is None:
            logits = self.forward(inputs, [index for index, _, _ in scored])
        if scored:
            logits, extra = logits[: len(inputs.sample_indices)], logits[len(inputs.sample_indices) :]
            _score_prompts(extra, scored)
        sampling = [item.seq for item in scheduled if item.is_sampling]
        if not sampling:
            return [], [], []
        params = [s.request.sampling for s in sampling]
        processed = apply_penalties(
            logits, params, [s.token_ids[: s.num_prompt_tokens] for s in sampling], [s.output_ids for s in sampling]
        )
        processed = mask_logits(processed, [s.constraint for s in sampling])
        batch = SamplingBatch.build(
            params,
            [s.seed for s in sampling],
            [s.num_output_tokens for s in sampling],
            self.device,
        )
        tokens, logprobs = sample(processed, batch, raw=logits)
        tokens = tokens.tolist()
        asked = [p.top_logprobs for p in params]
        tops = score(logits, tokens, asked)[1] if any(asked) else [()] * len(tokens)
        return tokens, logprobs.tolist(), tops

    def _replay(self, inputs: StepInputs) -> torch.Tensor | None:
        """Logits from a decode graph, or None when the step is not one a graph can run."""
        if self.graphs is None:
            return None
        meta = inputs.meta
        num_seqs = len(meta.context_lens)
        all_decode = inputs.input_ids.numel() == num_seqs == inputs.sample_indices.numel()
        bucket = self.graphs.bucket_for(num_seqs, meta.block_tables.shape[1], all_decode)
        if bucket is None:
            return None
        inputs = inputs.to(self.device)
        meta = inputs.meta
        return self.graphs.run(
            bucket, inputs.input_ids, inputs.positions, meta.slot_mapping, meta.lens, meta.block_tables
        )

    @property
    def tensor_parallel(self) -> bool:
        return self._peers is not None

    def abandon(self, why: str) -> None:
        """The other ranks can run no step again: closing stops them without a word to them."""
        if self._peers is not None:
            self._peers.abandon(why)

    def close(self) -> None:
        if self._peers is not None:
            self._peers.close()

"""The CPU engine's hot paths against their baselines, same process, same run.

- the 57 linears of the bench's 55M-parameter model (8 layers of q/k/v/o,
  gate/up/down, and the 32000 x 512 LM head), each with its own weight, so
  weights stream from memory as in a real step: `nn.Linear` (torch's BLAS)
  against the oneDNN packed linear the engine uses on CPU
  (cloud_worker/layers/packed_linear.py), at 8, 64 and 512 rows;
- paged decode attention over 8 layers (64 sequences, contexts 100..700,
  blocks scattered in a 4096-block pool, 8 query / 2 KV heads of 64): the
  C++ kernel (tandem_kernels/csrc/cpu_kernels.cpp) against the torch reference
  (gather the blocks, then SDPA).

Last line: one JSON object.

    python bench/cpu_kernels.py
"""

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloud_worker.layers.packed_linear import PackedLinear, onednn_linear_available  # noqa: E402
from tandem_kernels import cpu_extension  # noqa: E402
from tandem_kernels.paged_attention import _decode  # noqa: E402

HIDDEN, MLP, KV_DIM, VOCAB, LAYERS = 512, 1536, 128, 32000, 8


def timed_ms(fn, repeats: int = 10) -> float:
    fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats * 1000


def linears() -> list[nn.Linear]:
    shapes = [(HIDDEN, HIDDEN), (HIDDEN, KV_DIM), (HIDDEN, KV_DIM), (HIDDEN, HIDDEN)]
    shapes += [(HIDDEN, MLP), (HIDDEN, MLP), (MLP, HIDDEN)]
    return [nn.Linear(i, o, bias=False) for _ in range(LAYERS) for i, o in shapes] + [
        nn.Linear(HIDDEN, VOCAB, bias=False)
    ]


def linear_case(rows: int, plain: list[nn.Linear], packed: list[nn.Module]) -> dict:
    inputs = {n: torch.randn(rows, n) for n in (HIDDEN, MLP)}

    def run(layers):
        return lambda: [layer(inputs[layer.in_features]) for layer in layers]

    aten_ms, packed_ms = timed_ms(run(plain)), timed_ms(run(packed))
    return {"rows": rows, "aten_ms": round(aten_ms, 2), "packed_ms": round(packed_ms, 2),
            "speedup": round(aten_ms / packed_ms, 2)}  # fmt: skip


def decode_case() -> dict:
    ext = cpu_extension.extension()
    generator = torch.Generator().manual_seed(0)
    seqs, heads, kv_heads, dim, block, pool = 64, 8, 2, 64, 16, 4096
    caches = [
        (torch.randn(kv_heads, pool, block, dim, generator=generator), torch.randn(kv_heads, pool, block, dim))
        for _ in range(LAYERS)
    ]
    lens = torch.randint(100, 701, (seqs,), generator=generator)
    width = int(lens.max() + block - 1) // block
    tables = torch.randperm(pool, generator=generator)[: seqs * width].view(seqs, width)
    q = torch.randn(seqs, heads, dim, generator=generator)
    ref_ms = timed_ms(lambda: [_decode(q, k, v, tables, lens) for k, v in caches], 5)
    row = {"seqs": seqs, "layers": LAYERS, "context_tokens": int(lens.sum()), "reference_ms": round(ref_ms, 2)}
    if ext is None:
        return row | {"cpp_ms": None, "speedup": None}
    cpp_ms = timed_ms(lambda: [ext.paged_decode(q, k, v, tables, lens, dim**-0.5) for k, v in caches])
    torch.testing.assert_close(
        ext.paged_decode(q, *caches[0], tables, lens, dim**-0.5), _decode(q, *caches[0], tables, lens)
    )
    kv_bytes = LAYERS * int(lens.sum()) * kv_heads * dim * 4 * 2
    return row | {"cpp_ms": round(cpp_ms, 2), "cpp_gb_s": round(kv_bytes / cpp_ms / 1e6, 1),
                  "speedup": round(ref_ms / cpp_ms, 2)}  # fmt: skip


@torch.inference_mode()
def main() -> None:
    torch.manual_seed(0)
    result: dict = {"threads": torch.get_num_threads()}
    if onednn_linear_available():
        plain = linears()
        packed = [PackedLinear(layer) for layer in plain]
        rows = [linear_case(n, plain, packed) for n in (8, 64, 512)]
        for row in rows:
            print(json.dumps(row), flush=True)
        result |= {f"linears_speedup_{r['rows']}_rows": r["speedup"] for r in rows}
    decode = decode_case()
    print(json.dumps(decode), flush=True)
    result["decode_attention_speedup"] = decode["speedup"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()

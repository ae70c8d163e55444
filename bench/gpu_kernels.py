"""GPU kernel figures a reader can check against the card: bandwidth and speed against torch baselines.

- copy bandwidth of the card (a large device-to-device clone), the ceiling;
- paged decode attention (Triton, bf16, Llama-3-8B heads: 32 query / 8 KV
  heads of 128, and a 0.5B shape: 14 / 2 heads of 64), batch 1 to 256,
  context 512 to 32k: achieved bandwidth (K and V bytes read / time), and
  speed against torch SDPA on K/V already gathered contiguous (the gather
  not counted, which favours SDPA); both timed as replays of a CUDA graph
  (GPU time, as the engine's graph-replayed decode steps see it), and the
  kernel also eagerly (`triton_eager_ms`: with the host's launch cost);
- SiLU-and-mul and RMSNorm (fused residual): achieved bandwidth;
- sampling (top-k 50, top-p 0.9, Llama-3's 128256-token vocabulary, 64 and
  256 rows): the Triton kernel (no sort) against the torch reference, which
  sorts the rows that ask for top-p; both draw the same tokens.

- INT8 weight-only matmul against bf16 `torch.matmul` on Llama-3-8B's
  linear shapes (4096x4096, 14336x4096, 4096x14336), 1 to 256 rows: the
  decode regime, where reading half the weight bytes should show.

Last line: one JSON object.

    bash bench/gpu_suite.sh

`--smoke` runs the same code on the CPU through Triton's interpreter, on
shapes small enough for it (`make test` does, so the suite is known to run
end to end before a GPU is at hand); its figures mean nothing.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tandem_kernels.int8_linear import int8_linear_triton, quantize_per_channel  # noqa: E402
from tandem_kernels.paged_attention import paged_decode_triton  # noqa: E402
from tandem_kernels.rms_norm import rms_norm_triton  # noqa: E402
from tandem_kernels.sampling import sample_ref, sample_triton  # noqa: E402
from tandem_kernels.silu_and_mul import silu_and_mul_triton  # noqa: E402

BLOCK = 16
FULL = {
    "device": "cuda",
    "copy_bytes": 2 * 1024**3,
    "shapes": {"llama3-8b": (32, 8, 128), "0.5b": (14, 2, 64)},  # query heads, KV heads, head dim
    "decode": [(1, 512), (1, 32768), (32, 4096), (64, 8192), (256, 512), (256, 2048)],  # (batch, context)
    "long_context": 8192,
    "elementwise": (256, 14336, 4096),  # rows, MLP width, hidden
    "sampling": ((64, 256), 128256),  # rows, vocabulary
    "gemm": ((1, 16, 256), ((4096, 4096), (14336, 4096), (4096, 14336))),  # rows, (out, in)
    "repeats": 20,
}
SMOKE = {
    "device": "cpu",
    "copy_bytes": 2**20,
    "shapes": {"tiny": (4, 2, 16)},
    "decode": [(2, 40), (1, 2100)],  # the second one splits the keys (SPLIT_KEYS)
    "long_context": 2000,
    "elementwise": (4, 64, 32),
    "sampling": ((2, 3), 300),
    "gemm": ((1, 16), ((64, 32),)),
    "repeats": 1,
}
P = FULL


def timed_ms(fn, repeats: int | None = None) -> float:
    repeats = repeats or P["repeats"]
    if P["device"] == "cpu":  # the interpreter: nothing to compile or warm, and each call is slow
        started = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - started) / repeats * 1000
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def graph_ms(fn, repeats: int | None = None) -> float:
    """GPU time per call: `repeats` calls captured in one CUDA graph and replayed, so the host's launch cost (tens of
    microseconds per Triton launch, more than a short decode's work) is not timed. The engine replays its decode
    steps from graphs the same way. Eager timing where capture is refused, and on the CPU."""
    repeats = repeats or P["repeats"]
    if P["device"] == "cpu":
        return timed_ms(fn, repeats)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up (compiles) off the default stream, as capture asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(repeats):
                fn()
    except RuntimeError as e:
        print(f"  (no graph capture: {str(e)[:120]}; timed eagerly)", flush=True)
        return timed_ms(fn, repeats)
    return timed_ms(graph.replay, 3) / repeats


def copy_gb_s() -> float:
    x = torch.empty(P["copy_bytes"] // 2, dtype=torch.bfloat16, device=P["device"])
    ms = timed_ms(lambda: x.clone(), 10)
    return 2 * x.numel() * 2 / (ms / 1000) / 1e9  # read + write


def decode_case(name: str, batch: int, context: int) -> dict:
    heads, kv_heads, dim = P["shapes"][name]
    device = P["device"]
    per_seq = -(-context // BLOCK)
    k = torch.randn(kv_heads, batch * per_seq, BLOCK, dim, device=device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    tables = torch.randperm(batch * per_seq, device=device).view(batch, per_seq)
    lens = torch.full((batch,), context, device=device, dtype=torch.int64)
    q = torch.randn(batch, heads, dim, device=device, dtype=torch.bfloat16)
    eager_ms = timed_ms(lambda: paged_decode_triton(q, k, v, tables, lens))
    triton_ms = graph_ms(lambda: paged_decode_triton(q, k, v, tables, lens))
    kg = k[:, tables].flatten(2, 3).transpose(0, 1)  # [batch, kv_heads, context, dim], gathered once
    vg = v[:, tables].flatten(2, 3).transpose(0, 1)
    qs = q.view(batch, heads, 1, dim)
    sdpa_ms = graph_ms(lambda: torch.nn.functional.scaled_dot_product_attention(qs, kg, vg, enable_gqa=True))
    kv_bytes = 2 * batch * kv_heads * context * dim * 2
    return {"shape": name, "batch": batch, "context": context, "triton_ms": round(triton_ms, 4),
            "sdpa_ms": round(sdpa_ms, 4), "gb_s": round(kv_bytes / (triton_ms / 1000) / 1e9, 1),
            "triton_eager_ms": round(eager_ms, 4)}  # fmt: skip


def sampling_case(rows: int, vocab: int) -> dict:
    device = P["device"]
    logits = torch.randn(rows, vocab, device=device) * 4
    params = dict(
        temperature=torch.full((rows,), 0.8, device=device),
        top_k=torch.full((rows,), 50, device=device, dtype=torch.int64),
        top_p=torch.full((rows,), 0.9, device=device),
        min_p=torch.zeros(rows, device=device),
        seed=torch.arange(rows, device=device, dtype=torch.int64),
        step=torch.zeros(rows, device=device, dtype=torch.int64),
    )
    same = bool((sample_triton(logits, **params) == sample_ref(logits, **params)).all())
    triton_ms = timed_ms(lambda: sample_triton(logits, **params))
    sort_ms = timed_ms(lambda: sample_ref(logits, **params))
    return {
        "rows": rows,
        "vocab": vocab,
        "triton_ms": round(triton_ms, 4),
        "sort_ms": round(sort_ms, 4),
        "same_tokens": same,
    }


def int8_case(rows: int, out_features: int, in_features: int) -> dict:
    weight = torch.randn(out_features, in_features, device=P["device"], dtype=torch.bfloat16)
    weight_q, scale = quantize_per_channel(weight)
    x = torch.randn(rows, in_features, device=P["device"], dtype=torch.bfloat16)
    int8_ms = timed_ms(lambda: int8_linear_triton(x, weight_q, scale))
    bf16_ms = timed_ms(lambda: torch.matmul(x, weight.t()))
    return {"rows": rows, "out": out_features, "in": in_features, "int8_ms": round(int8_ms, 4),
            "bf16_ms": round(bf16_ms, 4), "int8_weight_gb_s": round(weight_q.numel() / (int8_ms / 1000) / 1e9, 1)}  # fmt: skip


def main() -> None:
    global P
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU through Triton's interpreter")
    if parser.parse_args().smoke:
        P = SMOKE
        if os.environ.get("TRITON_INTERPRET") != "1" or os.environ.get("TANDEM_KERNELS") != "triton":
            sys.exit("--smoke needs TRITON_INTERPRET=1 and TANDEM_KERNELS=triton set before Python starts")
    device, shapes = P["device"], P["shapes"]
    ceiling = copy_gb_s()
    print(f"copy bandwidth: {ceiling:.0f} GB/s")
    rows = []
    for name in shapes:
        for batch, context in P["decode"]:
            if 2 * batch * context * shapes[name][1] * shapes[name][2] * 2 > 40 * 1024**3:
                continue
            row = decode_case(name, batch, context)
            rows.append(row)
            print(json.dumps(row), flush=True)
    long = [r for r in rows if r["context"] >= P["long_context"]]
    num_rows, width, hidden = P["elementwise"]
    x = torch.randn(num_rows, width, device=device, dtype=torch.bfloat16)
    silu_ms = timed_ms(lambda: silu_and_mul_triton(x, x))
    h = torch.randn(num_rows, hidden, device=device, dtype=torch.bfloat16)
    w = torch.ones(hidden, device=device, dtype=torch.bfloat16)
    norm_ms = timed_ms(lambda: rms_norm_triton(h, w, 1e-5, h))
    sampling_rows, vocab = P["sampling"]
    sampling = [sampling_case(rows, vocab) for rows in sampling_rows]
    for row in sampling:
        print(json.dumps(row), flush=True)
    gemm_rows, gemm_shapes = P["gemm"]
    gemm = [int8_case(rows, o, i) for rows in gemm_rows for o, i in gemm_shapes]
    for row in gemm:
        print(json.dumps(row), flush=True)
    result = {
        "copy_gb_s": round(ceiling, 1),
        "decode_long_context_bw_fraction": round(max(r["gb_s"] for r in long) / ceiling, 3) if long else None,
        "decode_vs_sdpa_speedup_median": round(sorted(r["sdpa_ms"] / r["triton_ms"] for r in rows)[len(rows) // 2], 3),
        "silu_and_mul_gb_s": round(3 * x.numel() * 2 / (silu_ms / 1000) / 1e9, 1),
        "rms_norm_gb_s": round(4 * h.numel() * 2 / (norm_ms / 1000) / 1e9, 1),
        "sampling_vs_sort_top_p": round(min(r["sort_ms"] / r["triton_ms"] for r in sampling), 3),
        "sampling_same_tokens": all(r["same_tokens"] for r in sampling),
        "int8_gemm_vs_bf16_decode": round(sorted(r["bf16_ms"] / r["int8_ms"] for r in gemm if r["rows"] <= 16)[0], 3),
        "int8_gemm_vs_bf16_256_rows": round(
            min(r["bf16_ms"] / r["int8_ms"] for r in gemm if r["rows"] == max(gemm_rows)), 3
        ),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""The engine on one GPU (TP=1, bf16): tokens per second with CUDA graphs on and off, against HF transformers'
`generate` on the same GPU, same checkpoint, same workload, same run.

The checkpoint is a 0.5B Llama shape (hidden 896, 24 layers, 14 query / 2 KV heads of 64, MLP 4864, vocabulary
32000, random weights; about 415M parameters), built once under $TMPDIR. Measured:

- batch: 128 requests at once, prompts uniform in 16..512 tokens, outputs in 16..128, greedy, no early stop;
  the engine with decode graphs (`decode_graphs="auto"`) and without (`"off"`), and HF `generate` in padded
  static batches of 32 (only the tokens each request asked for are counted);
- one stream: a 128-token prompt and 256 new tokens, time per output token with graphs on and off, and the
  weight bandwidth that implies (all weight bytes read once per token) against the card's copy bandwidth;
- how closely greedy tokens follow HF in fp32 on the same GPU (first token, and the share of tokens before the
  first that differs), for the engine in bf16 and for HF itself in bf16: bf16 rounding flips near-ties, so the
  engine is held to what HF's own bf16 run achieves, not to equality (exact equality is the CPU suite's test);
- a batch-1 decode step replayed alone (its GPU time) and a host profile of one-stream decode steps.

Last line: one JSON object.

    bash bench/gpu_suite.sh            # runs this after the tests and the kernel figures
    python bench/gpu_engine.py --smoke # tiny shape on the CPU, graphs "eager": checks the script, not the GPU
    python bench/gpu_engine.py --fp32  # the same in fp32: where graphs and no graphs differ without bf16 rounding
"""

import argparse
import asyncio
import cProfile
import io
import json
import math
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloud_worker.build import build_engine  # noqa: E402
from cloud_worker.engine.config import EngineConfig  # noqa: E402
from serving.engine_api import GenerationRequest, SamplingParams  # noqa: E402
from tandem.demo_model import DemoShape, cached_demo_checkpoint  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_throughput import run_hf, workload  # noqa: E402
from gpu_kernels import copy_gb_s  # noqa: E402

FULL = {
    "device": "cuda",
    "graphs": "auto",
    "shape": DemoShape(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        fit_steps=0,
        model_vocab_size=32000,
    ),  # fmt: skip
    "requests": 128,
    "hf_batch": 32,
    "stream": (128, 256),  # prompt tokens, new tokens
    "kv_cache_mb": 4096,
    "budget": 2048,
}
SMOKE = {
    "device": "cpu",
    "graphs": "eager",
    "shape": DemoShape(fit_steps=0),
    "requests": 6,
    "hf_batch": 4,
    "stream": (8, 6),
    "kv_cache_mb": 64,
    "budget": 512,
}
P = FULL


def sync() -> None:
    if P["device"] == "cuda":
        torch.cuda.synchronize()


def run_engine(path: Path, graphs: str, requests: list, stream: tuple[int, int]) -> dict:
    config = EngineConfig(device=P["device"], decode_graphs=graphs, kv_cache_mb=P["kv_cache_mb"],
                          max_num_batched_tokens=P["budget"])  # fmt: skip
    started = time.perf_counter()
    engine = build_engine(path, config=config)
    build_s = time.perf_counter() - started

    async def one(i: int, prompt: list[int], num_out: int):
        request = GenerationRequest(f"r{i}", tuple(prompt), SamplingParams(max_tokens=num_out, ignore_eos=True))
        times, tokens = [], []
        async for chunk in engine.generate(request):
            tokens += chunk.token_ids
            times.append(time.perf_counter())
        return tokens, (times[-1] - times[0]) / max(1, len(tokens) - 1)

    async def all_requests(batch, offset=0):
        return await asyncio.gather(*(one(offset + i, p, n) for i, (p, n) in enumerate(batch)))

    try:
        asyncio.run(all_requests(workload(8, seed=99), 10_000))  # warm-up: compiles the kernels, fills no prefix
        sync()
        started = time.perf_counter()
        results = asyncio.run(all_requests(requests))
        sync()
        elapsed = time.perf_counter() - started
        prompt_len, num_new = stream
        alone = ([3 + i % 497 for i in range(prompt_len)], num_new)  # token ids the demo tokenizer has
        _, tpot = asyncio.run(all_requests([alone], 20_000))[0]
        graphs_ = engine.runner.graphs
        replays = graphs_.num_replays if graphs_ is not None else 0
        replay_ms = None
        if graphs_ is not None and graphs_.buckets[0].graph is not None:  # one batch-1 step on the GPU alone
            sync()
            started = time.perf_counter()
            for _ in range(100):
                graphs_.buckets[0].graph.replay()
            sync()
            replay_ms = (time.perf_counter() - started) * 10
        profile = cProfile.Profile()  # where a one-stream step's time goes, on the host (in the engine's thread)
        step = engine.step
        engine.step = lambda: profile.runcall(step)
        asyncio.run(all_requests([(alone[0], 64)], 30_000))
        engine.step = step
        report = io.StringIO()
        pstats.Stats(profile, stream=report).sort_stats("tottime").print_stats(14)
        print(f"  host profile of 64 one-stream steps, decode graphs {graphs}:", report.getvalue()[-2600:])
    finally:
        engine.close()
    return {"tokens": [r[0] for r in results], "elapsed_s": elapsed, "tpot_ms": tpot * 1000,
            "build_s": build_s, "graph_replays": replays, "replay_ms": replay_ms}  # fmt: skip


def agreement(tokens: list[list[int]], oracle: list[list[int]]) -> dict:
    """How far greedy tokens follow the oracle's: the first token, and the share of tokens before the first that
    differs (after a flip the two continue from different text, so later tokens say nothing)."""

    def common(a, b):
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    pairs = list(zip(tokens, oracle, strict=True))
    return {
        "first_token_pct": round(100 * sum(a[:1] == b[:1] for a, b in pairs) / len(pairs), 1),
        "prefix_pct": round(100 * sum(common(a, b) for a, b in pairs) / sum(len(b) for _, b in pairs), 1),
        "whole_pct": round(100 * sum(a == b for a, b in pairs) / len(pairs), 1),
    }


def main() -> None:
    global P
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a tiny shape on the CPU (checks the script only)")
    parser.add_argument("--fp32", action="store_true",
                        help="the engine and HF in fp32 (a diagnostic: does graphs' disagreement with no graphs "
                             "stay where bf16's rounding is gone?)")  # fmt: skip
    args = parser.parse_args()
    if args.smoke:
        P = SMOKE
    elif not torch.cuda.is_available():
        sys.exit("no CUDA device: run this on a GPU machine (or --smoke on the CPU)")
    if args.fp32:
        import cloud_worker.build

        cloud_worker.build.model_dtype = lambda device: torch.float32  # the engine takes its dtype from here
    cache = Path(os.environ.get("TANDEM_BENCH_CACHE", tempfile.gettempdir())) / "tandem-bench-gpu"
    shape = P["shape"]
    path = cached_demo_checkpoint(cache / f"llama-h{shape.hidden_size}-l{shape.num_hidden_layers}", shape)
    with safe_open(path / "model.safetensors", "pt") as f:
        params = sum(math.prod(f.get_slice(name).get_shape()) for name in f.keys())
    requests = workload(P["requests"])
    num_out = sum(n for _, n in requests)
    device_name = torch.cuda.get_device_name() if P["device"] == "cuda" else "cpu (smoke)"
    print(f"{device_name}: {params / 1e6:.0f}M parameters; {len(requests)} requests, "
          f"{sum(len(p) for p, _ in requests)} prompt tokens, {num_out} output tokens", flush=True)  # fmt: skip
    runs = {}
    for graphs in (P["graphs"], "off"):
        runs[graphs] = run_engine(path, graphs, requests, P["stream"])
        r = runs[graphs]
        print(f"  engine, decode graphs {graphs}: {num_out / r['elapsed_s']:.0f} tok/s, one stream "
              f"{r['tpot_ms']:.2f} ms/token, {r['graph_replays']} replays, built in {r['build_s']:.1f} s", flush=True)  # fmt: skip
    low = torch.bfloat16 if P["device"] == "cuda" and not args.fp32 else torch.float32
    hf = run_hf(path, requests, dtype=low, device=P["device"], batch_size=P["hf_batch"])
    print(f"  HF generate, static batches of {P['hf_batch']}: {num_out / hf['elapsed_s']:.0f} tok/s", flush=True)
    # fp32: what both bf16 runs are held to
    oracle = hf["tokens"] if low == torch.float32 else run_hf(path, requests, device=P["device"], batch_size=P["hf_batch"])["tokens"]  # fmt: skip
    on, off = runs[P["graphs"]], runs["off"]
    agree = {"engine": agreement(on["tokens"], oracle), "engine_no_graphs": agreement(off["tokens"], oracle),
             "hf": agreement(hf["tokens"], oracle)}  # fmt: skip
    print(f"  against HF fp32: {json.dumps(agree)}", flush=True)
    graphs_vs_eager = agreement(on["tokens"], off["tokens"])  # the same bf16 model, two summation orders
    print(f"  decode graphs against no graphs: {json.dumps(graphs_vs_eager)}", flush=True)
    ceiling = copy_gb_s() if P["device"] == "cuda" else float("nan")  # gpu_kernels' clone of 2 GiB
    weight_gb_s = params * low.itemsize / (on["tpot_ms"] / 1000) / 1e9  # weights read once per token
    result = {
        "device": device_name,
        "tensor_parallel": 1,
        "dtype": str(low).removeprefix("torch."),
        "params_m": round(params / 1e6, 1),
        "engine_tok_s_graphs": round(num_out / on["elapsed_s"], 1),
        "engine_tok_s_no_graphs": round(num_out / off["elapsed_s"], 1),
        "hf_tok_s": round(num_out / hf["elapsed_s"], 1),
        "ratio_vs_hf": round(hf["elapsed_s"] / on["elapsed_s"], 2),
        "graphs_speedup_batch": round(off["elapsed_s"] / on["elapsed_s"], 2),
        "tpot_ms_graphs": round(on["tpot_ms"], 3),
        "tpot_ms_no_graphs": round(off["tpot_ms"], 3),
        "graphs_speedup_one_stream": round(off["tpot_ms"] / on["tpot_ms"], 2),
        "one_stream_weight_gb_s": round(weight_gb_s, 1),
        "one_stream_bw_fraction": round(weight_gb_s / ceiling, 3) if ceiling == ceiling else None,
        "graph_replays": on["graph_replays"],
        "graphs_equal_no_graphs_pct": graphs_vs_eager["whole_pct"],
        "graphs_vs_no_graphs_prefix_pct": graphs_vs_eager["prefix_pct"],
        "replay_ms_batch1": round(on["replay_ms"], 3) if on["replay_ms"] else None,
        "engine_first_token_vs_fp32_pct": agree["engine"]["first_token_pct"],
        "hf_bf16_first_token_vs_fp32_pct": agree["hf"]["first_token_pct"],
        "engine_prefix_vs_fp32_pct": agree["engine"]["prefix_pct"],
        "engine_no_graphs_prefix_vs_fp32_pct": agree["engine_no_graphs"]["prefix_pct"],
        "hf_bf16_prefix_vs_fp32_pct": agree["hf"]["prefix_pct"],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Engine throughput: the paged engine (continuous batching) against HF transformers
`generate` in padded static batches of 8, on the same checkpoint, same workload, same run.

Workload: 64 requests (256 without --quick), prompt lengths uniform in
16..512 tokens, output lengths uniform in 16..128 tokens, all submitted at
once, greedy, no early stop. The checkpoint is a ~55M-parameter Llama shape
(hidden 512, 8 layers, 8 heads, 2 KV heads, intermediate 1536, vocab 32000,
random weights), built once and cached under ~/.cache/tandem/bench. HF runs
the requests in arrival order, 8 at a time, left-padded, each batch to its
longest output (static batching cannot stop one row early); only the tokens
each request asked for are counted, for both.

Also measured: TTFT and time per output token (p50) for the engine, KV
waste (allocated token slots not holding a token, averaged over steps), and
the scheduler's own time per step with 256 running sequences (schedule,
input preparation and bookkeeping, no model).

The engine's CPU linears run oneDNN with packed weights by default
(cloud_worker/layers/packed_linear.py); HF's run torch's BLAS. So that the
reader can tell that gain from the rest, HF runs a second time with its
linears packed the same way: `ratio_same_linears` compares the engine with
that (with `--cpu-linear aten` both use torch's BLAS, and it equals `ratio`).
Last line: one JSON object.

    python bench/engine_throughput.py --quick
"""

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cloud_worker.build import build_engine  # noqa: E402
from cloud_worker.engine.block_manager import BlockManager  # noqa: E402
from cloud_worker.engine.config import CPU_LINEARS, EngineConfig  # noqa: E402
from cloud_worker.engine.model_runner import prepare_inputs  # noqa: E402
from cloud_worker.engine.scheduler import Scheduler  # noqa: E402
from cloud_worker.engine.sequence import Sequence  # noqa: E402
from cloud_worker.layers.packed_linear import pack_linears  # noqa: E402
from serving.engine_api import GenerationRequest, SamplingParams  # noqa: E402
from tandem.demo_model import DemoShape, cached_demo_checkpoint  # noqa: E402

CACHE = Path.home() / ".cache" / "tandem" / "bench"
SHAPE = DemoShape(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2, fit_steps=0, model_vocab_size=32000)  # fmt: skip
HF_BATCH = 8


def checkpoint() -> Path:
    return cached_demo_checkpoint(CACHE / "llama-55m", SHAPE)


def workload(num_requests: int, seed: int = 0) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    return [
        ([rng.randrange(3, 500) for _ in range(rng.randint(16, 512))], rng.randint(16, 128))
        for _ in range(num_requests)
    ]


def run_engine(path: Path, requests: list[tuple[list[int], int]], budget: int, cpu_linear: str) -> dict:
    config = EngineConfig(num_kv_blocks=4096, max_num_batched_tokens=budget, cpu_linear=cpu_linear)
    engine = build_engine(path, config=config)
    waste: list[float] = []
    original_step = engine.step

    def step_and_measure_waste():
        # Between steps a running sequence's blocks hold exactly its computed tokens, rounded up to blocks.
        running = engine.scheduler.running
        slots = sum(len(s.block_table) for s in running) * engine.block_manager.block_size_tokens
        if slots:
            waste.append(1 - sum(s.num_computed_tokens for s in running) / slots)
        original_step()

    engine.step = step_and_measure_waste

    async def one(i: int, prompt: list[int], num_out: int):
        request = GenerationRequest(f"r{i}", tuple(prompt), SamplingParams(max_tokens=num_out, ignore_eos=True))
        started, times, tokens = time.perf_counter(), [], []
        async for chunk in engine.generate(request):
            tokens += chunk.token_ids
            times.append(time.perf_counter())
        return tokens, times[0] - started, (times[-1] - times[0]) / max(1, len(tokens) - 1)

    async def all_requests(batch):
        return await asyncio.gather(*(one(i, p, n) for i, (p, n) in enumerate(batch)))

    asyncio.run(all_requests(workload(8, seed=99)))  # warm-up on other prompts: nothing to hit in the prefix cache
    waste.clear()
    started = time.perf_counter()
    results = asyncio.run(all_requests(requests))
    elapsed = time.perf_counter() - started
    engine.close()
    return {
        "tokens": [r[0] for r in results],
        "elapsed_s": elapsed,
        "ttft_p50_ms": statistics.median(r[1] for r in results) * 1000,
        "tpot_p50_ms": statistics.median(r[2] for r in results) * 1000,
        "kv_waste_pct": 100 * statistics.mean(waste),
        "steps": engine.num_steps,
    }


def run_hf(
    path: Path,
    requests: list[tuple[list[int], int]],
    packed_linears: bool = False,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    batch_size: int = HF_BATCH,
) -> dict:
    """HF `generate` in padded static batches, in arrival order (bench/gpu_engine.py runs it on a GPU in bf16)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    if packed_linears:
        pack_linears(model)
    outputs: list[list[int]] = []

    def batch_generate(batch):
        width = max(len(p) for p, _ in batch)
        ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in batch], device=device)
        num_out = max(n for _, n in batch)
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=num_out,
                min_new_tokens=num_out,
                do_sample=False,
                pad_token_id=0,
            )
        return [out[i, width : width + n].tolist() for i, (_, n) in enumerate(batch)]

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    batch_generate(requests[:2])  # warm-up
    sync()
    started = time.perf_counter()
    for start in range(0, len(requests), batch_size):
        outputs += batch_generate(requests[start : start + batch_size])
    sync()
    return {"tokens": outputs, "elapsed_s": time.perf_counter() - started}


def scheduler_overhead_ms(num_seqs: int = 256, num_steps: int = 200) -> float:
    """Scheduler time per decode step with num_seqs running (no model): schedule, inputs, bookkeeping."""
    bm = BlockManager(num_seqs * 40, 16)
    scheduler = Scheduler(EngineConfig(max_num_batched_tokens=8192, max_num_seqs=num_seqs), bm)
    rng = random.Random(1)
    for i in range(num_seqs):
        prompt = tuple(rng.randrange(3, 500) for _ in range(rng.randint(16, 300)))
        scheduler.add(Sequence(GenerationRequest(f"r{i}", prompt), "m", 16, seed=i))
    scheduled = scheduler.schedule()  # the prefill step, not timed
    scheduler.finish_step(scheduled)
    for item in scheduled:
        item.seq.token_ids.append(7)
    started = time.perf_counter()
    for _ in range(num_steps):
        scheduled = scheduler.schedule()
        prepare_inputs(scheduled, 16)
        scheduler.finish_step(scheduled)
        for item in scheduled:
            item.seq.token_ids.append(7)
    assert len(scheduled) == num_seqs
    return (time.perf_counter() - started) / num_steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64 requests instead of 256")
    parser.add_argument("--max-batched-tokens", type=int, default=512, help="the engine's step budget (its default)")
    parser.add_argument("--cpu-linear", choices=CPU_LINEARS, default="auto", help="the engine's CPU linears (default)")
    args = parser.parse_args()
    path = checkpoint()
    requests = workload(64 if args.quick else 256)
    num_out = sum(n for _, n in requests)
    print(f"{len(requests)} requests, {sum(len(p) for p, _ in requests)} prompt tokens, {num_out} output tokens")
    engine = run_engine(path, requests, args.max_batched_tokens, args.cpu_linear)
    print(f"  tandem engine: {engine['elapsed_s']:.1f} s, {engine['steps']} steps", flush=True)
    hf = run_hf(path, requests)
    print(f"  HF generate, static batches of {HF_BATCH}: {hf['elapsed_s']:.1f} s", flush=True)
    if args.cpu_linear == "aten":
        hf_same = hf  # both on torch's BLAS already
    else:
        hf_same = run_hf(path, requests, packed_linears=True)
        print(f"  HF generate, same, linears packed as the engine's: {hf_same['elapsed_s']:.1f} s", flush=True)
    same = sum(a == b for a, b in zip(engine["tokens"], hf["tokens"], strict=True))
    result = {
        "requests": len(requests),
        "max_batched_tokens": args.max_batched_tokens,
        "cpu_linear": args.cpu_linear,
        "engine_tok_s": round(num_out / engine["elapsed_s"], 1),
        "hf_tok_s": round(num_out / hf["elapsed_s"], 1),
        "ratio": round(hf["elapsed_s"] / engine["elapsed_s"], 2),
        "hf_same_linears_tok_s": round(num_out / hf_same["elapsed_s"], 1),
        "ratio_same_linears": round(hf_same["elapsed_s"] / engine["elapsed_s"], 2),
        "ttft_p50_ms": round(engine["ttft_p50_ms"], 1),
        "tpot_p50_ms": round(engine["tpot_p50_ms"], 1),
        "kv_waste_pct": round(engine["kv_waste_pct"], 2),
        "sched_overhead_ms_per_step": round(scheduler_overhead_ms(), 3),
        "greedy_equal_to_hf_pct": round(100 * same / len(requests), 1),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

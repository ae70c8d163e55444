"""Structured output: the paged engine's throughput with a JSON-schema grammar against free decoding, one run.

The same requests (32 with --quick, else 96; prompts of 16 to 256 tokens, 96 answer tokens each at
temperature 1, seeded) run through one engine in alternating rounds: free, then each request under
`response_format` json_schema (an object of a string up to 2,000 characters and an integer: a model with
random weights rarely closes the string, so constrained answers run about as long as free ones). Output
tokens per second are compared per round; the ratio is the median over rounds (goal: constrained at
least 0.9 of free, i.e. at most 10 % slower). Every constrained answer that ended by itself is checked
to parse and validate; one cut by max_tokens is counted, not checked. The checkpoint is
bench/engine_throughput.py's ~55M-parameter Llama shape (vocabulary 32,000, tokenizer of 512).
Last line: one JSON object.

    python bench/structured.py --quick
"""

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.engine_throughput import checkpoint  # noqa: E402
from bench.privacy import cpu_info  # noqa: E402
from cloud_worker.build import build_engine  # noqa: E402
from cloud_worker.engine.config import EngineConfig  # noqa: E402
from serving.engine_api import GenerationRequest, SamplingParams  # noqa: E402
from serving.grammar import grammar_for  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 2000}, "count": {"type": "integer"}},
    "required": ["text", "count"],
    "additionalProperties": False,
}
NUM_OUT = 96


def prompts(count: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 500) for _ in range(rng.randint(16, 256))] for _ in range(count)]


def one_round(engine, batch: list[list[int]], grammar: str, round_index: int) -> tuple[float, list[tuple[str, str]]]:
    """(output tokens per second, [(text, finish reason)]) for the whole batch submitted at once."""

    async def one(i: int, prompt: list[int]):
        params = SamplingParams(
            max_tokens=NUM_OUT, temperature=1.0, seed=1000 * round_index + i, ignore_eos=not grammar, grammar=grammar
        )
        text, tokens, reason = "", 0, None
        async for chunk in engine.generate(GenerationRequest(f"r{round_index}-{i}", tuple(prompt), params)):
            text, tokens, reason = text + chunk.text, tokens + len(chunk.token_ids), chunk.finish_reason or reason
        return text, tokens, reason

    async def everything():
        return await asyncio.gather(*(one(i, p) for i, p in enumerate(batch)))

    started = time.perf_counter()
    results = asyncio.run(everything())
    elapsed = time.perf_counter() - started
    return sum(r[1] for r in results) / elapsed, [(r[0], r[2]) for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="32 requests and 3 rounds instead of 96 and 5")
    args = parser.parse_args()
    cpu, flags = cpu_info()
    batch, rounds = prompts(32 if args.quick else 96), 3 if args.quick else 5
    grammar = grammar_for({"type": "json_schema", "json_schema": {"name": "bench", "schema": SCHEMA}})
    engine = build_engine(checkpoint(), config=EngineConfig(num_kv_blocks=4096))
    print(f"{cpu} ({', '.join(flags) or 'no AVX2'}); {len(batch)} requests x {NUM_OUT} tokens, {rounds} rounds")
    one_round(engine, prompts(4, seed=9), grammar, -1)  # warm-up: kernels, the grammar's first compile
    ratios, free_rates, constrained_rates, finished, cut = [], [], [], 0, 0
    for r in range(rounds):
        free, _ = one_round(engine, batch, "", 2 * r)
        constrained, answers = one_round(engine, batch, grammar, 2 * r + 1)
        for text, reason in answers:
            if reason == "stop":
                jsonschema.validate(json.loads(text), SCHEMA)  # raises: the bench fails loudly
                finished += 1
            else:
                cut += 1
        free_rates.append(free)
        constrained_rates.append(constrained)
        ratios.append(constrained / free)
        print(f"  round {r}: free {free:.0f} tok/s, constrained {constrained:.0f} tok/s, ratio {ratios[-1]:.3f}")
    engine.close()
    result = {
        "cpu": cpu,
        "isa": flags,
        "requests": len(batch),
        "rounds": rounds,
        "free_tok_s": round(statistics.median(free_rates), 1),
        "constrained_tok_s": round(statistics.median(constrained_rates), 1),
        "ratio_constrained_vs_free": round(statistics.median(ratios), 3),
        "constrained_finished_valid": finished,
        "constrained_cut_by_max_tokens": cut,
        "goal_met": statistics.median(ratios) >= 0.9,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()

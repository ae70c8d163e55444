"""Edge decode speed: INT4 against fp32 ONNX, and against onnxruntime-genai's own INT4 build.

Builds a ~100M-parameter Llama-shape checkpoint once (random weights, cached
under ~/.cache/tandem/bench), exports it fp32 and INT4 with `tandem edge
export`'s code, and times greedy decoding of the same prompt on both in the
same run. If onnxruntime-genai is installed (`pip install -e '.[bench]'`),
its model builder makes an INT4 CPU model from the same checkpoint, which is
timed the same way. Prints what each achieves in weight bandwidth
(bytes of weights read per token x tokens/s), so figures can be checked
against the machine. Last line: one JSON object.

    python bench/edge_decode.py --quick
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edge_agent.export import MANIFEST_NAME, cached_export  # noqa: E402
from edge_agent.quantize import FP32, INT4  # noqa: E402
from edge_agent.runner import OnnxStepModel  # noqa: E402
from tandem.demo_model import DemoShape, cached_demo_checkpoint  # noqa: E402

CACHE = Path.home() / ".cache" / "tandem" / "bench"
SHAPE = DemoShape(hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
                  num_key_value_heads=4, fit_steps=0, model_vocab_size=32000)  # fmt: skip


def checkpoint() -> Path:
    return cached_demo_checkpoint(CACHE / "llama-100m", SHAPE)


def num_params(path: Path) -> int:
    with safe_open(str(path / "model.safetensors"), framework="np") as f:
        return sum(int(np.prod(f.get_slice(name).get_shape())) for name in f.keys())


def decode_tok_s(step_model, prompt: list[int], num_tokens: int) -> float:
    logits, state = step_model.prefill(prompt)
    started = time.perf_counter()
    for i in range(num_tokens):
        token = int(logits.argmax())
        logits, state = step_model.decode(state, token, len(prompt) + i)
    return num_tokens / (time.perf_counter() - started)


def prefill_tok_s(step_model, prompt: list[int], keep: int, repeats: int) -> float:
    """Prompt tokens per second of one prefill; `keep`: positions the LM head runs on (1 is what generation does;
    all of them is what it did before logits_to_keep)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step_model._run(prompt, 0, keep)
        times.append(time.perf_counter() - started)
    return len(prompt) / statistics.median(times)


def ortgenai_tok_s(path: Path, prompt: list[int], num_tokens: int) -> tuple[float | None, str | None]:
    try:
        import onnxruntime_genai as og
    except ImportError:
        return None, "onnxruntime-genai is not installed (pip install -e '.[bench]')"
    out = CACHE / "ortgenai-int4-cpu"
    if not (out / "genai_config.json").is_file():
        print("building the onnxruntime-genai INT4 model (once)", file=sys.stderr)
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(path), "-o", str(out),
                   "-p", "int4", "-e", "cpu", "-c", str(CACHE / "ortgenai-cache")]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            return (
                None,
                f"its model builder failed: {result.stderr.strip().splitlines()[-1] if result.stderr else result.returncode}",
            )
    model = og.Model(str(out))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + num_tokens, min_length=len(prompt) + num_tokens, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)  # the prefill
    started, count = time.perf_counter(), 0
    while not generator.is_done():
        generator.generate_next_token()
        count += 1
    return count / (time.perf_counter() - started), None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="32 tokens once instead of 128 tokens three times")
    args = parser.parse_args()
    num_tokens, repeats = (32, 1) if args.quick else (128, 3)
    path = checkpoint()
    prompt = list(range(10, 42))  # 32 prompt tokens; the weights are random, so any ids will do
    exports = {name: cached_export(path, CACHE / "exports", q) for name, q in (("fp32", FP32), ("int4", INT4))}
    speeds, weight_bytes, prefill = {}, {}, {}
    long_prompt = [10 + i % 30000 for i in range(512)]
    for name, export_dir in exports.items():
        step = OnnxStepModel(export_dir)
        decode_tok_s(step, prompt, 4)  # warm-up
        speeds[name] = statistics.median(decode_tok_s(step, prompt, num_tokens) for _ in range(repeats))
        prefill_tok_s(step, long_prompt, 1, 1)  # warm-up
        # alternating, so drift hits both alike
        last, every = [], []
        for _ in range(repeats + 2):
            last.append(prefill_tok_s(step, long_prompt, 1, 1))
            every.append(prefill_tok_s(step, long_prompt, len(long_prompt), 1))
        prefill[name] = (statistics.median(last), statistics.median(every))
        sizes = json.loads((export_dir / MANIFEST_NAME).read_text())["sizes"]
        weight_bytes[name] = sizes["model_bytes"]
    og_tok_s, og_skipped = ortgenai_tok_s(path, prompt, num_tokens)
    int4_sizes = json.loads((exports["int4"] / MANIFEST_NAME).read_text())["sizes"]
    result = {
        "params_m": round(num_params(path) / 1e6, 1),
        "decode_tokens": num_tokens,
        "fp32_tok_s": round(speeds["fp32"], 2),
        "int4_tok_s": round(speeds["int4"], 2),
        "int4_speedup": round(speeds["int4"] / speeds["fp32"], 3),
        "size_ratio": round(int4_sizes["linear_weight_bytes"] / int4_sizes["fp32_linear_weight_bytes"], 3),
        "fp32_weight_gb_s": round(weight_bytes["fp32"] * speeds["fp32"] / 1e9, 2),
        "int4_weight_gb_s": round(weight_bytes["int4"] * speeds["int4"] / 1e9, 2),
        "fp32_prefill_512_tok_s": round(prefill["fp32"][0], 1),
        "int4_prefill_512_tok_s": round(prefill["int4"][0], 1),
        "int4_prefill_lm_head_last_vs_all": round(prefill["int4"][0] / prefill["int4"][1], 3),
        "fp32_prefill_lm_head_last_vs_all": round(prefill["fp32"][0] / prefill["fp32"][1], 3),
        "ortgenai_tok_s": None if og_tok_s is None else round(og_tok_s, 2),
        "ratio_vs_ortgenai": None if og_tok_s is None else round(speeds["int4"] / og_tok_s, 3),
    }
    if og_skipped:
        result["ortgenai_skipped"] = og_skipped
    print(f"{result['params_m']} M parameters, {num_tokens} decode tokens after a 32-token prompt")
    for name in ("fp32", "int4"):
        print(f"  tandem {name}: {result[f'{name}_tok_s']} tok/s ({result[f'{name}_weight_gb_s']} GB/s of weights); "
              f"prefill of 512 tokens {prefill[name][0]:.0f} tok/s (LM head on every position: {prefill[name][1]:.0f})")
    if og_tok_s is not None:
        print(f"  onnxruntime-genai int4: {result['ortgenai_tok_s']} tok/s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Edge decode speed: INT4 against fp32 ONNX, against onnxruntime-genai's own INT4 build, and against llama.cpp.

Builds a ~100M-parameter Llama-shape checkpoint once (random weights, cached
under ~/.cache/tandem/bench), exports it fp32 and INT4 with `tandem edge
export`'s code, and times greedy decoding of the same prompt on both in the
same run. If onnxruntime-genai is installed (`pip install -e '.[bench]'`),
its model builder makes an INT4 CPU model from the same checkpoint, which is
timed the same way. The three decode in rounds, each round starting with a
different one, and INT4's speedup and its ratio to onnxruntime-genai are the
medians of the per-round ratios. If llama-cpp-python is installed (the bench
extra builds it from source), the checkpoint is converted with llama.cpp's own
convert_hf_to_gguf.py (from its source distribution, fetched once with pip
download) and quantized to Q4_0 with its quantizer; Tandem INT4 and llama.cpp
Q4_0 then run in alternating rounds in this process, with the same threads
and flash attention on for llama.cpp, and the ratios are the median of the
per-round ratios. Top-1 agreement with the fp32 model is measured on the same
teacher-forced sequence for both. Prints the CPU and its instruction sets, the
machine's copy bandwidth, and what each run achieves in weight bandwidth
(bytes of weights read per token x tokens/s), so figures can be checked
against the machine. With --profile, onnxruntime's profiler says where an
INT4 decode step's time goes, per op type. Last line: one JSON object.

    python bench/edge_decode.py --quick
"""

import argparse
import ctypes
import functools
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.privacy import cpu_info  # noqa: E402
from bench.rounds import round_order  # noqa: E402
from edge_agent.export import MANIFEST_NAME, cached_export  # noqa: E402
from edge_agent.quantize import FP32, INT4, Quantization  # noqa: E402
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


def decode_profile(export_dir: Path, prompt: list[int], steps: int = 64) -> dict[str, dict]:
    """Where a decode step's time goes: per op type, its share of onnxruntime's kernel time over `steps` decode
    steps, the mean time of one call and the calls a step makes, from onnxruntime's own profiler."""
    with tempfile.TemporaryDirectory() as scratch:
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(scratch) / "decode")
        step = OnnxStepModel(export_dir, options=options)
        decode_tok_s(step, prompt, 4)  # warm-up
        decode_tok_s(step, prompt, steps)
        events = json.loads(Path(step.session.end_profiling()).read_text())
    runs = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    first_step = runs[-steps]  # the last `steps` runs are the decode steps; the prefills and warm-up come before
    spent: dict[str, list[float]] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= first_step:
            spent.setdefault(event["args"]["op_name"], []).append(event["dur"])
    total = sum(sum(d) for d in spent.values())
    return {
        op: {"share": round(sum(d) / total, 3), "mean_us": round(sum(d) / len(d), 1), "calls": len(d) // steps}
        for op, d in sorted(spent.items(), key=lambda kv: -sum(kv[1]))
    }


class OrtGenai:
    """onnxruntime-genai's own INT4 CPU model of the checkpoint, built once by its model builder."""

    def __init__(self, model) -> None:
        self.model = model

    @classmethod
    def load(cls, path: Path) -> tuple["OrtGenai | None", str | None]:
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
                why = result.stderr.strip().splitlines()[-1] if result.stderr else result.returncode
                return None, f"its model builder failed: {why}"
        return cls(og.Model(str(out))), None

    def decode_tok_s(self, prompt: list[int], num_tokens: int) -> float:
        import onnxruntime_genai as og

        params = og.GeneratorParams(self.model)
        total = len(prompt) + num_tokens
        params.set_search_options(max_length=total, min_length=total, do_sample=False)
        generator = og.Generator(self.model, params)
        generator.append_tokens(prompt)  # the prefill
        started, count = time.perf_counter(), 0
        while not generator.is_done():
            generator.generate_next_token()
            count += 1
        return count / (time.perf_counter() - started)


def decode_rounds(decoders: dict, prompt: list[int], num_tokens: int, rounds: int) -> dict[str, list[float]]:
    """Each decoder's tok/s per round; every round runs them all, starting with a different one each time, so a
    machine's drift (this kind of VM drifts by a third within a minute) hits them alike and the per-round ratios
    stay meaningful."""
    names = list(decoders)
    for name in names:  # warm-up
        decoders[name](prompt, 4)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in round_order(names, r):
            out[name].append(decoders[name](prompt, num_tokens))
    return out


def per_round_ratio(runs: dict[str, list[float]], a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(runs[a], runs[b], strict=True))


def copy_gb_s(megabytes: int = 256) -> float:
    """The machine's memory bandwidth as a large copy sees it: bytes read plus bytes written per second."""
    src = np.ones(megabytes * 2**20 // 8)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.nbytes / best / 1e9


def llamacpp_source(version: str) -> tuple[Path | None, str | None]:
    """llama.cpp's converter (convert_hf_to_gguf.py, conversion/, gguf-py/) from llama-cpp-python's source
    distribution of the installed version, fetched once."""
    root = CACHE / f"llama_cpp_python-{version}"
    llama_dir = root / "vendor" / "llama.cpp"
    if (llama_dir / "convert_hf_to_gguf.py").is_file():
        return llama_dir, None
    download = CACHE / "sdist"
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               f"llama-cpp-python=={version}", "-d", str(download)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    archives = sorted(download.glob(f"llama_cpp_python-{version}.tar.gz"))
    if result.returncode != 0 or not archives:
        return None, f"pip download of llama-cpp-python=={version}'s source failed: {result.stderr.strip()[-300:]}"
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with tarfile.open(archives[0]) as tar:
        members = [m for m in tar.getmembers()
                   if m.name == prefix + "convert_hf_to_gguf.py" or m.name.startswith((prefix + "conversion/", prefix + "gguf-py/"))]  # fmt: skip
        tar.extractall(CACHE, members=members, filter="data")
    return llama_dir, None


def llamacpp_models(path: Path, threads: int) -> tuple[dict[str, Path] | None, str | None]:
    """The checkpoint as f32 and Q4_0 GGUF files, made with llama.cpp's own converter and quantizer (once)."""
    try:
        import llama_cpp
    except ImportError:
        return None, "llama-cpp-python is not installed (pip install -e '.[bench]')"
    out = CACHE / f"gguf-{llama_cpp.__version__}"
    files = {"f32": out / "model-f32.gguf", "q4_0": out / "model-q4_0.gguf"}
    if files["q4_0"].is_file():
        return files, None
    llama_dir, why = llamacpp_source(llama_cpp.__version__)
    if llama_dir is None:
        return None, why
    out.mkdir(parents=True, exist_ok=True)
    print("converting the checkpoint with llama.cpp's convert_hf_to_gguf.py (once)", file=sys.stderr)
    convert = [sys.executable, str(Path(__file__).with_name("llamacpp_convert.py")), str(llama_dir), str(path),
               str(files["f32"])]  # fmt: skip
    result = subprocess.run(convert, capture_output=True, text=True)
    if result.returncode != 0:
        return None, f"convert_hf_to_gguf.py failed: {result.stderr.strip().splitlines()[-1]}"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, threads
    partial = files["q4_0"].with_suffix(".partial")
    if llama_cpp.llama_model_quantize(str(files["f32"]).encode(), str(partial).encode(), ctypes.byref(params)) != 0:
        return None, "llama.cpp's quantizer failed"
    partial.rename(files["q4_0"])
    return files, None


class LlamaCpp:
    """A GGUF model on llama.cpp, driven token by token as Tandem's edge runner is (greedy, argmax in numpy)."""

    def __init__(self, path: Path, threads: int, context: int, logits_all: bool = False) -> None:
        from llama_cpp import Llama

        self.llm = Llama(str(path), n_ctx=context, n_batch=512, n_ubatch=512, n_threads=threads,
                         n_threads_batch=threads, flash_attn=True, logits_all=logits_all, verbose=False)  # fmt: skip
        self.vocab = self.llm.n_vocab()

    def _last_logits(self) -> np.ndarray:
        return np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(self.vocab,))

    def decode_tok_s(self, prompt: list[int], num_tokens: int) -> float:
        self.llm.reset()
        self.llm.eval(prompt)
        started = time.perf_counter()
        for _ in range(num_tokens):
            token = int(self._last_logits().argmax())
            self.llm.eval([token])
        return num_tokens / (time.perf_counter() - started)

    def prefill_tok_s(self, prompt: list[int]) -> float:
        self.llm.reset()
        started = time.perf_counter()
        self.llm.eval(prompt)
        int(self._last_logits().argmax())
        return len(prompt) / (time.perf_counter() - started)

    def all_logits(self, ids: list[int]) -> np.ndarray:
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)])


def top1_agreement(reference: np.ndarray, other: np.ndarray) -> float:
    return float((reference.argmax(-1) == other.argmax(-1)).mean())


def gguf_bytes_per_token(path: Path) -> int:
    """Bytes of weights a decode step reads from a GGUF file: every tensor but the embedding table (one row)."""
    from gguf import GGUFReader

    return sum(int(t.n_bytes) for t in GGUFReader(str(path)).tensors if t.name != "token_embd.weight")


def against_llamacpp(
    path: Path, exports: dict, int4: Quantization, prompt: list[int], long_prompt: list[int], num_tokens: int,
    rounds: int, threads: int, copy: float,
) -> dict:  # fmt: skip
    """Tandem INT4 and llama.cpp Q4_0 in alternating rounds (who goes first alternates too), same threads."""
    files, skipped = llamacpp_models(path, threads)
    if files is None:
        return {"llamacpp_skipped": skipped}
    tandem, other = OnnxStepModel(exports["int4"]), LlamaCpp(files["q4_0"], threads, context=1024)
    decode_tok_s(tandem, prompt, 4), other.decode_tok_s(prompt, 4)  # warm-up
    prefill_tok_s(tandem, long_prompt, 1, 1), other.prefill_tok_s(long_prompt)
    runs = {"t_dec": [], "l_dec": [], "t_pre": [], "l_pre": []}
    for r in range(rounds):
        order = [("t", tandem), ("l", other)] if r % 2 == 0 else [("l", other), ("t", tandem)]
        for who, model in order:
            runs[f"{who}_dec"].append(
                decode_tok_s(model, prompt, num_tokens) if who == "t" else model.decode_tok_s(prompt, num_tokens)
            )
        for who, model in order:
            runs[f"{who}_pre"].append(
                prefill_tok_s(model, long_prompt, 1, 1) if who == "t" else model.prefill_tok_s(long_prompt)
            )
    ratio = lambda a, b: statistics.median(x / y for x, y in zip(runs[a], runs[b], strict=True))  # noqa: E731
    sequence = long_prompt[:256]  # teacher-forced: the top-1 at every position
    reference = OnnxStepModel(exports["fp32"]).logits(sequence)
    agree_tandem = top1_agreement(reference, tandem.logits(sequence))
    agree_llamacpp = top1_agreement(
        reference, LlamaCpp(files["q4_0"], threads, 512, logits_all=True).all_logits(sequence)
    )
    # llama.cpp's Q4_0 quantizes the embedding table too: so does `--quantize-embedding`, the like-for-like file
    qemb = cached_export(path, CACHE / "exports", replace(int4, quantize_embedding=True))
    qemb_bytes = json.loads((qemb / MANIFEST_NAME).read_text())["sizes"]["model_bytes"]
    agree_qemb = top1_agreement(reference, OnnxStepModel(qemb).logits(sequence))
    int4_sizes = json.loads((exports["int4"] / MANIFEST_NAME).read_text())["sizes"]
    gguf_read = gguf_bytes_per_token(files["q4_0"])
    t_dec, l_dec = statistics.median(runs["t_dec"]), statistics.median(runs["l_dec"])
    return {
        "llamacpp_q4_0_tok_s": round(l_dec, 2),
        "llamacpp_q4_0_prefill_512_tok_s": round(statistics.median(runs["l_pre"]), 1),
        "ratio_vs_llamacpp_decode": round(ratio("t_dec", "l_dec"), 3),
        "ratio_vs_llamacpp_prefill": round(ratio("t_pre", "l_pre"), 3),
        "file_ratio_vs_llamacpp": round(int4_sizes["model_bytes"] / files["q4_0"].stat().st_size, 3),
        "llamacpp_q4_0_file_mb": round(files["q4_0"].stat().st_size / 1e6, 1),
        "int4_file_mb": round(int4_sizes["model_bytes"] / 1e6, 1),
        "int4_qemb_file_mb": round(qemb_bytes / 1e6, 1),
        "file_ratio_vs_llamacpp_qemb": round(qemb_bytes / files["q4_0"].stat().st_size, 3),
        "top1_agreement_int4": round(agree_tandem, 4),
        "top1_agreement_int4_qemb": round(agree_qemb, 4),
        "top1_agreement_llamacpp_q4_0": round(agree_llamacpp, 4),
        # bytes a decode step reads (all weights but the embedding table) x tokens/s, against the copy bandwidth
        "int4_read_gb_s": round(int4_sizes["linear_weight_bytes"] * t_dec / 1e9, 2),
        "llamacpp_q4_0_read_gb_s": round(gguf_read * l_dec / 1e9, 2),
        "int4_read_vs_copy": round(int4_sizes["linear_weight_bytes"] * t_dec / 1e9 / copy, 3),
        "llamacpp_q4_0_read_vs_copy": round(gguf_read * l_dec / 1e9 / copy, 3),
        "llamacpp_rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="32 tokens once instead of 128 tokens three times")
    parser.add_argument(
        "--rounds", type=int, default=None, help="alternating rounds against llama.cpp (default 3, --quick 2)"
    )
    parser.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp columns")
    parser.add_argument(
        "--profile", action="store_true", help="also profile 64 INT4 decode steps per op type (onnxruntime's profiler)"
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=INT4.block_size,
        help=f"INT4 block size (default {INT4.block_size}, the agent's)",
    )
    args = parser.parse_args()
    num_tokens, repeats = (32, 1) if args.quick else (128, 3)
    rounds = args.rounds or (2 if args.quick else 3)
    cpu, isa = cpu_info()
    machine = {"cpu": cpu, "isa": isa, "threads": os.cpu_count()}
    copy = copy_gb_s()
    print(f"{machine['cpu']}, {machine['threads']} threads, {', '.join(machine['isa'])}; copy {copy:.1f} GB/s",
          file=sys.stderr)  # fmt: skip
    path = checkpoint()
    prompt = list(range(10, 42))  # 32 prompt tokens; the weights are random, so any ids will do
    int4 = replace(INT4, block_size=args.block_size)
    exports = {name: cached_export(path, CACHE / "exports", q) for name, q in (("fp32", FP32), ("int4", int4))}
    steps = {name: OnnxStepModel(export_dir) for name, export_dir in exports.items()}
    weight_bytes, prefill = {}, {}
    long_prompt = [10 + i % 30000 for i in range(512)]
    for name, export_dir in exports.items():
        step = steps[name]
        prefill_tok_s(step, long_prompt, 1, 1)  # warm-up
        # alternating, so drift hits both alike
        last, every = [], []
        for _ in range(repeats + 2):
            last.append(prefill_tok_s(step, long_prompt, 1, 1))
            every.append(prefill_tok_s(step, long_prompt, len(long_prompt), 1))
        prefill[name] = (statistics.median(last), statistics.median(every))
        sizes = json.loads((export_dir / MANIFEST_NAME).read_text())["sizes"]
        weight_bytes[name] = sizes["model_bytes"]
    genai, og_skipped = OrtGenai.load(path)
    decoders = {name: functools.partial(decode_tok_s, step) for name, step in steps.items()}
    if genai is not None:
        decoders["ortgenai"] = genai.decode_tok_s
    runs = decode_rounds(decoders, prompt, num_tokens, repeats)
    speeds = {name: statistics.median(values) for name, values in runs.items()}
    og_tok_s = speeds.get("ortgenai")
    int4_sizes = json.loads((exports["int4"] / MANIFEST_NAME).read_text())["sizes"]
    fp32_sizes = json.loads((exports["fp32"] / MANIFEST_NAME).read_text())["sizes"]
    del steps, decoders, genai
    versus = {}
    if args.no_llamacpp:
        versus["llamacpp_skipped"] = "--no-llamacpp"
    else:
        versus = against_llamacpp(
            path, exports, int4, prompt, long_prompt, num_tokens, rounds, machine["threads"], copy
        )
    result = {
        **machine,
        "int4_block_size": int4.block_size,
        "copy_gb_s": round(copy, 1),
        "params_m": round(num_params(path) / 1e6, 1),
        "decode_tokens": num_tokens,
        "fp32_tok_s": round(speeds["fp32"], 2),
        "int4_tok_s": round(speeds["int4"], 2),
        "int4_speedup": round(per_round_ratio(runs, "int4", "fp32"), 3),
        "size_ratio": round(int4_sizes["linear_weight_bytes"] / int4_sizes["fp32_linear_weight_bytes"], 3),
        "fp32_weight_gb_s": round(weight_bytes["fp32"] * speeds["fp32"] / 1e9, 2),
        "int4_weight_gb_s": round(weight_bytes["int4"] * speeds["int4"] / 1e9, 2),
        "fp32_prefill_512_tok_s": round(prefill["fp32"][0], 1),
        "int4_prefill_512_tok_s": round(prefill["int4"][0], 1),
        "int4_prefill_lm_head_last_vs_all": round(prefill["int4"][0] / prefill["int4"][1], 3),
        "fp32_prefill_lm_head_last_vs_all": round(prefill["fp32"][0] / prefill["fp32"][1], 3),
        "ortgenai_tok_s": None if og_tok_s is None else round(og_tok_s, 2),
        "ratio_vs_ortgenai": None if og_tok_s is None else round(per_round_ratio(runs, "int4", "ortgenai"), 3),
        "int4_file_vs_fp32": round(int4_sizes["model_bytes"] / fp32_sizes["model_bytes"], 3),
        **versus,
    }
    if og_skipped:
        result["ortgenai_skipped"] = og_skipped
    if args.profile:
        result["int4_decode_profile"] = decode_profile(exports["int4"], prompt)
        print("INT4 decode, share of kernel time per op (mean per call, calls per step):")
        for op, row in result["int4_decode_profile"].items():
            print(f"  {op}: {row['share']:.1%} ({row['mean_us']} us x {row['calls']})")
    print(f"{result['params_m']} M parameters, {num_tokens} decode tokens after a 32-token prompt")
    for name in ("fp32", "int4"):
        print(
            f"  tandem {name}: {result[f'{name}_tok_s']} tok/s ({result[f'{name}_weight_gb_s']} GB/s of weights); "
            f"prefill of 512 tokens {prefill[name][0]:.0f} tok/s (LM head on every position: {prefill[name][1]:.0f})"
        )
    if og_tok_s is not None:
        print(f"  onnxruntime-genai int4: {result['ortgenai_tok_s']} tok/s")
    if "llamacpp_q4_0_tok_s" in result:
        print(
            f"  llama.cpp Q4_0 ({rounds} alternating rounds): decode {result['llamacpp_q4_0_tok_s']} tok/s, "
            f"prefill of 512 tokens {result['llamacpp_q4_0_prefill_512_tok_s']} tok/s; Tandem INT4 / llama.cpp: "
            f"decode {result['ratio_vs_llamacpp_decode']}x, prefill {result['ratio_vs_llamacpp_prefill']}x, "
            f"file {result['file_ratio_vs_llamacpp']}x ({result['file_ratio_vs_llamacpp_qemb']}x with "
            f"--quantize-embedding); top-1 agreement with fp32: Tandem INT4 {result['top1_agreement_int4']} "
            f"({result['top1_agreement_int4_qemb']}), llama.cpp Q4_0 {result['top1_agreement_llamacpp_q4_0']}"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()

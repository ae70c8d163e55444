"""bench/gpu_kernels.py and bench/gpu_engine.py, the GPU suite's figures, run end to end on the CPU (the kernels
through Triton's interpreter).

The figures of a smoke run mean nothing; what this shows is that the script a GPU run depends on has no
error in its own code and prints every ratio the suite promises, with the sampling kernel drawing the
same tokens as the sort-based reference on the way.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")
SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "gpu_kernels.py"
RATIOS = {
    "copy_gb_s",
    "decode_long_context_bw_fraction",
    "decode_vs_sdpa_speedup_median",
    "silu_and_mul_gb_s",
    "rms_norm_gb_s",
    "sampling_vs_sort_top_p",
    "sampling_same_tokens",
    "int8_gemm_vs_bf16_decode",
    "int8_gemm_vs_bf16_256_rows",
}


def test_gpu_kernel_figures_run_end_to_end_in_the_interpreter():
    env = os.environ | {"TRITON_INTERPRET": "1", "TANDEM_KERNELS": "triton"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(figures) == RATIOS
    assert figures["sampling_same_tokens"] is True
    assert all(figures[k] is not None for k in RATIOS)


def test_smoke_refuses_to_run_without_the_interpreter():
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TANDEM_KERNELS")}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "TRITON_INTERPRET=1" in result.stderr


ENGINE_SCRIPT = SCRIPT.parent / "gpu_engine.py"


def test_gpu_engine_figures_run_end_to_end_on_the_cpu(tmp_path):
    """bench/gpu_engine.py (the suite's last step) on a tiny shape, decode graphs 'eager': the engine runs with and
    without the bucketed graph path and agrees with itself and with HF fp32, and every figure is printed."""
    env = os.environ | {"TANDEM_BENCH_CACHE": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, str(ENGINE_SCRIPT), "--smoke"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["graph_replays"] > 0 and figures["graphs_equal_no_graphs_pct"] == 100.0
    assert figures["engine_first_token_vs_fp32_pct"] == 100.0 and figures["engine_prefix_vs_fp32_pct"] == 100.0
    assert figures["engine_tok_s_graphs"] > 0 and figures["hf_tok_s"] > 0 and figures["tensor_parallel"] == 1
    assert "host profile of 64 one-stream steps" in result.stdout


def test_gpu_engine_says_plainly_that_it_needs_a_gpu():
    result = subprocess.run([sys.executable, str(ENGINE_SCRIPT)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "no CUDA device" in result.stderr

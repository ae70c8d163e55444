"""bench/gpu_kernels.py, the GPU suite's figures, runs end to end on the CPU through Triton's interpreter.

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

"""Every Triton kernel compiles for NVIDIA GPUs (sm_90, sm_80) down to a cubin, here, without a GPU.

The interpreter tests check what the kernels compute; this checks that the real compiler accepts them
(tl.dot shapes and dtypes, casts, layouts, ptxas). It runs in its own process: the interpreter, which
other kernel tests switch on, must be off when the kernels are defined.
"""

import importlib.util
import os
import subprocess
import sys

import pytest

# Not imported here: importing triton in this process before the interpreter tests set TRITON_INTERPRET
# would turn the interpreter off for them.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


def test_every_kernel_compiles_for_hopper_and_ampere():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_DEFAULT_FP_FUSION": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "tandem_kernels.aot_check"], env=env, capture_output=True, text=True, timeout=600
    )
    compiled = [line for line in result.stdout.splitlines() if line.startswith("ok")]
    assert result.returncode == 0, result.stdout + result.stderr[-2000:]
    assert len(compiled) == 36, result.stdout  # 18 kernel variants x 2 targets

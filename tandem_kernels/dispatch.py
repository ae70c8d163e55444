"""Which implementation a kernel call runs: Triton on CUDA tensors, the torch reference elsewhere.

`TANDEM_KERNELS=triton` forces Triton for CPU tensors too, which is how the
tests run every kernel through Triton's interpreter (`TRITON_INTERPRET=1`).
`TANDEM_KERNELS=torch` forces the references everywhere (to bisect a bug).
"""

import functools
import importlib.util
import os

import torch


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def use_triton(tensor: torch.Tensor) -> bool:
    mode = os.environ.get("TANDEM_KERNELS", "auto")
    if mode == "torch" or not triton_available():
        return False
    return mode == "triton" or tensor.is_cuda


def check(condition: bool, message: str) -> None:
    """Launcher argument checks: a clear error instead of a wrong answer or a crash inside a kernel."""
    if not condition:
        raise ValueError(message)

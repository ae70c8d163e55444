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


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def triton_refuses(head_dim: int, block_size: int) -> str | None:
    """Why the Triton kernels cannot take a model's heads or a KV block size (None: they can): the rotary, KV-write
    and paged-attention kernels tile by powers of 2, and tl.dot needs blocks of 16 on a GPU. The kernels then run
    the torch references for it (a review: a Phi-3-mini, head_dim 96, or `--block-size 24` started on CUDA and
    failed every request)."""
    if not (_power_of_two(head_dim) and _power_of_two(block_size)):
        return f"head_dim {head_dim} and block size {block_size}: Triton's kernels take powers of 2"
    if min(head_dim, block_size) < 16 and os.environ.get("TRITON_INTERPRET") != "1":
        return f"head_dim {head_dim} and block size {block_size}: Triton's paged attention (tl.dot) takes 16 or more on a GPU"
    return None

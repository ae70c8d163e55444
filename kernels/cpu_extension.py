"""CPU kernels in C++ (kernels/csrc/cpu_kernels.cpp), compiled once per machine, the torch references as fallback.

Paged decode attention, RMSNorm (residual fused), rotary, and SiLU-and-multiply: each kernel's dispatch in
kernels/ calls its C++ version for fp32 CPU tensors (`usable_for`) and its torch reference otherwise.

`make install` builds them (`python -m kernels.cpu_extension`), so no server start pays for the compile;
the build lives under the Python prefix (the venv, or the image), keyed by the source and the flags. Where
no compiler is found, or `TANDEM_CPU_KERNELS=0`, everything runs the torch references, and one log line
says so. Checked against the references in tests/unit/kernels/test_cpu_extension.py.
"""

import functools
import hashlib
import logging
import os
import platform
import sys
from pathlib import Path

import torch

log = logging.getLogger(__name__)
SOURCE = Path(__file__).parent / "csrc" / "cpu_kernels.cpp"
# Built where it runs, so for this CPU's vector units by default; an image built on one machine for others
# sets a baseline instead (deploy/Dockerfile: TANDEM_CPU_KERNEL_ARCH=x86-64-v3, AVX2 and FMA).
ARCH = os.environ.get("TANDEM_CPU_KERNEL_ARCH", "native")
# -fopenmp: at::parallel_for is OpenMP in torch's CPU builds, and without the flag its pragma is ignored and
# every kernel runs on one thread. The extension then links libgomp.so.1, which resolves to the copy torch
# has already loaded (one OpenMP runtime, one thread pool). A compiler without OpenMP (Apple's clang) gets
# the second variant: the same kernels on one thread.
BASE_FLAGS = ["-O3", "-ffast-math", f"-march={ARCH}"]
if platform.machine().lower() in ("x86_64", "amd64"):
    BASE_FLAGS.append("-mprefer-vector-width=512")  # where AVX-512 exists, use it (GCC prefers 256 on some CPUs)
VARIANTS = [(BASE_FLAGS + ["-fopenmp"], ["-fopenmp"]), (BASE_FLAGS, [])]  # (compile flags, link flags)


def build_directory(flags: list[str]) -> Path:
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    return Path(sys.prefix) / "tandem-kernels" / key


@functools.cache
def extension():
    """The compiled module, or None (with the reason logged once) when it cannot be had."""
    if os.environ.get("TANDEM_CPU_KERNELS", "1") == "0":
        return None
    from torch.utils.cpp_extension import load

    failure = None
    for cflags, ldflags in VARIANTS:
        try:
            directory = build_directory(cflags)
            directory.mkdir(parents=True, exist_ok=True)
            module = load(
                "tandem_cpu_kernels",
                [str(SOURCE)],
                extra_cflags=cflags,
                extra_ldflags=ldflags,
                build_directory=str(directory),
            )
        except Exception as exc:  # noqa: BLE001 - no compiler, no write access, a failed build: try the next
            failure = failure or exc
            continue
        if not ldflags:
            log.warning("CPU kernels built without OpenMP (%s): they run on one thread", _first_line(failure))
        return module
    log.warning("CPU kernels unavailable (%s); using the torch references", _first_line(failure))
    return None


def _first_line(exc: BaseException | None) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def usable_for(*tensors: torch.Tensor):
    """The compiled module where it may run on these tensors, else None (the caller runs the torch reference).

    fp32 CPU tensors only, and never while torch traces, exports or compiles the model (the ONNX export
    must see the references' ops) or records autograd (the C++ functions have no backward).
    """
    if not all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors):
        return None
    if torch.is_grad_enabled() or torch.jit.is_tracing() or torch.compiler.is_compiling():
        return None
    if torch.onnx.is_in_onnx_export():
        return None
    return extension()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print("tandem CPU kernels:", "built" if extension() is not None else "unavailable (torch references in use)")

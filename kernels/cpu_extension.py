"""CPU kernels in C++ (kernels/csrc/), compiled once per machine, with the torch references as the fallback.

`make install` builds them (`python -m kernels.cpu_extension`), so no server start pays for the compile;
the build lives under the Python prefix (the venv, or the image), keyed by the source's content. Where
no compiler is found, or `TANDEM_CPU_KERNELS=0`, everything runs the torch references, and one log line
says so. Checked against the references in tests/unit/kernels/test_cpu_extension.py.
"""

import functools
import hashlib
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)
SOURCE = Path(__file__).parent / "csrc" / "paged_attention_cpu.cpp"
# Built where it runs, so for this CPU's vector units by default; an image built on one machine for others
# sets a baseline instead (deploy/Dockerfile: TANDEM_CPU_KERNEL_ARCH=x86-64-v3, AVX2 and FMA).
ARCH = os.environ.get("TANDEM_CPU_KERNEL_ARCH", "native")
FLAGS = ["-O3", "-ffast-math", f"-march={ARCH}"]


def build_directory() -> Path:
    key = hashlib.sha256(SOURCE.read_bytes() + ARCH.encode()).hexdigest()[:16]
    return Path(sys.prefix) / "tandem-kernels" / key


@functools.cache
def extension():
    """The compiled module, or None (with the reason logged once) when it cannot be had."""
    if os.environ.get("TANDEM_CPU_KERNELS", "1") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load

        directory = build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        return load("tandem_cpu_kernels", [str(SOURCE)], extra_cflags=FLAGS, build_directory=str(directory))
    except Exception as exc:  # noqa: BLE001 - no compiler, no write access, a failed build: all mean "use torch"
        log.warning("CPU attention kernel unavailable (%s); using the torch reference", str(exc).splitlines()[0])
        return None


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    print("tandem CPU kernels:", "built" if extension() is not None else "unavailable (torch references in use)")

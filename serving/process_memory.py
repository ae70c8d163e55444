"""Memory for Stats: the CUDA caching allocator's reserved bytes and their peak when this
process uses a GPU, otherwise the process RSS and its high watermark."""

import os
import resource
import sys

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _cuda():
    """torch.cuda when this process has initialised it; never imports torch or touches a device itself."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda
    return None


def memory_bytes() -> int:
    if (cuda := _cuda()) is not None:
        return cuda.memory_reserved()
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except OSError:
        return memory_watermark_bytes()


def memory_watermark_bytes() -> int:
    if (cuda := _cuda()) is not None:
        return cuda.max_memory_reserved()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB

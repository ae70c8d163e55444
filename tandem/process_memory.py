"""Process memory for Stats: current RSS and its high watermark (CPU; GPU later)."""

import os
import resource

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def memory_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE_BYTES
    except OSError:
        return memory_watermark_bytes()


def memory_watermark_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB

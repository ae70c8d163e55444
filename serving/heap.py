"""The cyclic garbage collector, set for a server that has started.

A request allocates thousands of container objects (a parsed body, the validation's models, spans, the answer's
chunks); almost all of them die by reference count, but CPython counts every allocation and runs a young collection
every 700 of them, and every hundredth young collection is a full one, walking every object the process holds: the
hundreds of thousands made at start-up (the web framework, the tokenizer, the policy, the gRPC stubs) that live as
long as the process does. In the gateway that cost 8-12 % of its requests a second (bench/gateway_overhead.py,
docs/benchmarks.md).

`settle()`, once start-up is done, moves what exists then out of every later collection (`gc.freeze`) and lets
GEN0_THRESHOLD allocations pass between young collections. Reference counting frees objects as before; only garbage
in reference cycles waits a little longer. 10,000 served as many requests a second but left ~2 MB more of such
garbage in the gateway at a hundred open streams (bench/scaling.py's memory per stream: 30 KB against 9.7); at
2,000, RSS under half a minute of full load is the same as without `settle()` (114.5 MB). A start-up object that
later becomes part of an unreachable cycle is never collected: start-up objects live for the process, so that
stays bounded.
"""

import gc

GEN0_THRESHOLD = 2_000


def settle() -> None:
    """Call once, in a server process, when it is ready to serve (never in a test process: freezing a test run's
    objects would keep its cyclic garbage for the whole run)."""
    gc.collect()
    gc.freeze()
    threshold0, threshold1, threshold2 = gc.get_threshold()
    gc.set_threshold(max(threshold0, GEN0_THRESHOLD), threshold1, threshold2)

"""serving/heap.py: after `settle()`, start-up's objects are out of the collector's walks, young collections are
rarer, and garbage made afterwards, cycles included, is still collected. Run in a child process: freezing the test
run's own objects would keep its cyclic garbage for the rest of the run."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import gc, weakref
    from serving import heap

    class Node:
        pass

    before = gc.get_threshold()
    kept = [Node() for _ in range(1000)]  # start-up's objects
    heap.settle()
    assert gc.get_freeze_count() >= len(kept), gc.get_freeze_count()
    assert gc.get_threshold() == (heap.GEN0_THRESHOLD, *before[1:]), gc.get_threshold()
    # A request's cyclic garbage, made after start-up, is still collected.
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None, "a cycle made after settle() was not collected"
    # A second call (a reloaded server) leaves the threshold where it is.
    heap.settle()
    assert gc.get_threshold()[0] == heap.GEN0_THRESHOLD
    print("ok")
    """
)


def test_settle_freezes_start_up_and_still_collects_later_cycles():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

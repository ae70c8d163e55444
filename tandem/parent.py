"""What a process `tandem up` started (tandem/stack.py's `spawn`) does for itself first: stop when its parent is
gone. A module of its own, so that a worker or gateway does not import the launcher (which once imported torch to
build the demo model: a gateway so started loaded torch, ~190 MB, and started 2.5 s later)."""

import os
import signal
import sys

STOP_WITH_PARENT = "TANDEM_STOP_WITH_PARENT"  # a spawned process's parent pid: it stops when that process is gone


def stop_with_parent() -> None:
    """In a process `spawn` started: SIGTERM when the parent dies, even by SIGKILL, so a killed `tandem up` leaves
    no worker holding its port for the next start (Linux: PR_SET_PDEATHSIG; elsewhere the next start names the
    ports in use). Set by the child itself, after exec: no preexec_fn in a parent that may run threads."""
    parent = os.environ.pop(STOP_WITH_PARENT, None)
    if parent is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != int(parent):  # the parent died before the call above: nothing would signal us
        os.kill(os.getpid(), signal.SIGTERM)

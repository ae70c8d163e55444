"""A Python script run in a PID namespace of its own, as a container's process is (`unshare`, as root)."""

import subprocess
import sys

import pytest


def in_another_pid_namespace(script: str, *args: str) -> subprocess.Popen:
    """The script, started under `unshare --pid` with pipes to its stdin and stdout; the test is skipped where this
    machine has no PID namespaces to give."""
    if subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True).returncode != 0:
        pytest.skip("no PID namespaces here (unshare needs root)")
    return subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

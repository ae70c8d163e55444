"""A folder built whole or not at all, by any number of processes at once (the demo checkpoint, an edge export).

Each builder writes into a sibling folder of its own (`NAME.partial-PID-XXXXXX`) and renames it into place when
it is complete, so a build killed midway never leaves a folder that looks finished, and two builders (two edge
agents sharing a cache, two `tandem up`s) never delete each other's work. Where another builder got there first,
its folder is kept when `is_whole` accepts it, and this one's is dropped. Folders left by builders that died are
removed by the next build.
"""

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

PARTIAL = ".partial"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def sweep(final: Path) -> None:
    """Remove the partial folders of `final` whose builder is gone (and the one-name form older versions used)."""
    for path in final.parent.glob(f"{final.name}{PARTIAL}*"):
        pid = path.name[len(final.name) + len(PARTIAL) :].lstrip("-").partition("-")[0]
        if not pid.isdigit() or not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def building(final: Path, is_whole: Callable[[Path], bool]) -> Iterator[Path]:
    """Yields an empty folder of this process's own; when the block ends without an error, it becomes `final`.
    If `final` exists by then and `is_whole(final)`, another builder finished first: theirs is kept. Otherwise
    (an older, broken or stale one) it is replaced."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep(final)
    tmp = final.with_name(f"{final.name}{PARTIAL}-{os.getpid()}-{secrets.token_hex(3)}")
    tmp.mkdir()
    try:
        yield tmp
        for _ in range(5):
            try:
                tmp.rename(final)  # atomic; fails where `final` is a folder that is not empty
                return
            except OSError:
                if final.exists() and is_whole(final):
                    return  # the finally drops ours
                shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

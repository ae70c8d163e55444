"""A folder built whole or not at all, by any number of processes at once (the demo checkpoint, an edge export).

Each builder writes into a sibling folder of its own (`NAME.partial-PID-XXXXXX`) and renames it into place when
it is complete, so a build killed midway never leaves a folder that looks finished, and two builders (two edge
agents sharing a cache, two `tandem up`s) never delete each other's work. Where another builder got there first,
its folder is kept when `is_whole` accepts it, and this one's is dropped. Folders left by builders that died are
removed by the next build.

An existing `final` is replaced only when everything in it is a file its builder writes (`owns`): a folder a user
named by mistake (their own notes, the checkpoint being exported) is refused before any work, never emptied.
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


def proc_stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command's name (which may hold spaces and ')'): [0] the state, [1] the
    parent's PID, [19] the start time in clock ticks after boot. OSError where there is no such file."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _started(pid: int) -> str | None:
    """When the process started; None where /proc does not say."""
    try:
        fields = proc_stat(pid)
    except OSError:
        return None
    return fields[19] if len(fields) > 19 and fields[19].isdigit() else None


def owner_tag() -> str:
    """This process, for the name of what it builds: `PID-START`, or `PID` where /proc is not there. The start
    time tells a restarted process from the one that died: in a container the builder is PID 1 every time."""
    pid = os.getpid()
    started = _started(pid)
    return f"{pid}-{started}" if started else str(pid)


def owner_alive(tag: str) -> bool:
    """Is the process an `owner_tag` names still running (the same one, where the tag has its start time)?"""
    pid, _, started = tag.partition("-")
    if not pid.isdigit() or not _alive(int(pid)):
        return False
    if not started.isdigit():
        return True
    now = _started(int(pid))
    return now is None or now == started


def sweep(final: Path) -> None:
    """Remove the partial folders of `final` whose builder is gone (and the one-name form older versions used).
    A partial folder is `NAME.partial-PID-START-RANDOM`, or `NAME.partial-PID-RANDOM` (no /proc, older versions)."""
    for path in final.parent.glob(f"{final.name}{PARTIAL}*"):
        parts = path.name[len(final.name) + len(PARTIAL) :].lstrip("-").split("-")
        tag = "-".join(parts[:2]) if len(parts) == 3 else parts[0]
        if len(parts) not in (2, 3) or not owner_alive(tag):
            shutil.rmtree(path, ignore_errors=True)


# What a file browser leaves in any folder it shows: no reason to refuse one (a `.git` is, and `.*` is not ignored).
_DESKTOP_LITTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})


class ForeignFolder(Exception):
    """The folder to build holds what its builder does not write: it is not replaced."""


def check_replaceable(final: Path, owns: Callable[[str], bool]) -> None:
    """ForeignFolder unless `final` is absent, or a folder of nothing but names `owns` accepts."""
    final = Path(final)
    if not final.exists():
        return
    if not final.is_dir():
        raise ForeignFolder(f"{final} exists and is not a folder; choose a new or empty folder")
    foreign = sorted(p.name for p in final.iterdir() if not owns(p.name) and p.name not in _DESKTOP_LITTER)
    if foreign:
        listed = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ForeignFolder(
            f"{final} already holds {listed}, which this does not write; it is left as it is: choose a new or empty "
            "folder"
        )


@contextlib.contextmanager
def building(final: Path, is_whole: Callable[[Path], bool], owns: Callable[[str], bool]) -> Iterator[Path]:
    """Yields an empty folder of this process's own; when the block ends without an error, it becomes `final`.
    If `final` exists by then and `is_whole(final)`, another builder finished first: theirs is kept. Otherwise
    (an older, broken or stale one) it is replaced, where it holds nothing but what `owns` names (ForeignFolder,
    raised before the block runs or before anything is deleted)."""
    final = Path(final)
    check_replaceable(final, owns)
    final.parent.mkdir(parents=True, exist_ok=True)
    sweep(final)
    tmp = final.with_name(f"{final.name}{PARTIAL}-{owner_tag()}-{secrets.token_hex(3)}")
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
                check_replaceable(final, owns)  # again: something may have been put there meanwhile
                shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

"""A folder built whole or not at all, by any number of processes at once (the demo checkpoint, an edge export).

Each builder writes into a sibling folder of its own (`NAME.partial-TAG-XXXXXX`, TAG from `owner_tag`) and
renames it into place when it is complete, so a build killed midway never leaves a folder that looks finished, and
two builders (two edge agents sharing a cache, two `tandem up`s) never delete each other's work. Where another
builder got there first, its folder is kept when `is_whole` accepts it, and this one's is dropped. Folders left by
builders that died are removed by the next build: only folders named exactly so, never a user's `NAME.partial-notes`.

An existing `final` is replaced only when everything in it is a file its builder writes (`owns`): a folder a user
named by mistake (their own notes, the checkpoint being exported) is refused before any work, never emptied.
"""

import contextlib
import os
import re
import secrets
import shutil
import time
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


def _pid_namespace() -> str | None:
    """Which PID namespace this process is in (the inode of /proc/self/ns/pid); None where /proc does not say."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return None


def owner_tag() -> str:
    """This process, for the name of what it builds: `PID-START-nNAMESPACE`, or less where /proc does not say. The
    start time tells a restarted process from the one that died: in a container the builder is PID 1 every time.
    The namespace tells whether the PID means anything here: containers sharing a host folder (the cache warmer
    and the workers share the node's model cache) each have their own PIDs."""
    pid, started, namespace = os.getpid(), _started(os.getpid()), _pid_namespace()
    return str(pid) + (f"-{started}" if started else "") + (f"-n{namespace}" if namespace else "")


_TAG = r"(?P<pid>\d+)(?:-(?P<started>\d+))?(?:-n(?P<namespace>\d+))?"

# A builder in another PID namespace cannot be asked whether it is alive; one still at work writes all the time
# (a download, a copy, an export), so what nothing touched for this long was left by one that died.
FOREIGN_IDLE_S = 3600.0


def owner_gone(tag: str, path: Path) -> bool:
    """Has the builder an `owner_tag` names stopped, leaving `path` behind? A tag of this PID namespace, or of
    none (older versions, no /proc), is judged by its PID and start time; one of another namespace only by how
    long nothing in `path` has changed (a review: another container's PID 1 is alive here but another process,
    and its build was deleted under it). A tag that does not parse is no builder's: gone."""
    match = re.fullmatch(_TAG, tag)
    if match is None:
        return True
    if match["namespace"] is not None and match["namespace"] != _pid_namespace():
        return time.time() - _last_change(path) > FOREIGN_IDLE_S
    pid, started = int(match["pid"]), match["started"]
    if not _alive(pid):
        return True
    now = _started(pid) if started else None
    return now is not None and now != started


def _last_change(path: Path) -> float:
    """The newest modification time of `path` and everything in it (0 where it is gone)."""
    newest = 0.0
    for root, dirs, files in os.walk(path):
        for name in (".", *dirs, *files):
            with contextlib.suppress(OSError):  # deleted meanwhile
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
    return newest


def _partial_name(final: Path) -> re.Pattern:
    """A builder's folder for `final`: `NAME.partial-TAG-RANDOM` (RANDOM: 6 hex digits), or `NAME.partial`, the one
    name older versions used. Nothing else: a user's `NAME.partial-notes` or `NAME.partial copy` is theirs (a review
    found both deleted by `tandem edge export CKPT NAME`)."""
    return re.compile(rf"{re.escape(final.name)}{re.escape(PARTIAL)}(?:-(?P<tag>{_TAG})-[0-9a-f]{{6}})?")


def sweep(final: Path) -> None:
    """Remove the partial folders of `final` whose builder is gone (`owner_gone`)."""
    pattern = _partial_name(final)
    try:
        names = os.listdir(final.parent)  # not a glob: a `k [2]`'s leftovers were never matched (a review)
    except FileNotFoundError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        path = final.parent / name
        if match is None or path.is_symlink() or not path.is_dir():
            continue
        if match["tag"] is None or owner_gone(match["tag"], path):
            shutil.rmtree(path, ignore_errors=True)


# What a file browser leaves in any folder it shows: no reason to refuse one (a `.git` is, and `.*` is not ignored).
DESKTOP_LITTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})


class ForeignFolder(Exception):
    """The folder to build holds what its builder does not write: it is not replaced."""


def check_replaceable(final: Path, owns: Callable[[str], bool]) -> None:
    """ForeignFolder unless `final` is absent, or a folder of nothing but names `owns` accepts."""
    final = Path(final)
    if not final.exists():
        return
    if not final.is_dir():
        raise ForeignFolder(f"{final} exists and is not a folder; choose a new or empty folder")
    foreign = sorted(p.name for p in final.iterdir() if not owns(p.name) and p.name not in DESKTOP_LITTER)
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

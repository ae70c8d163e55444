"""Folders built whole or not at all, by several processes at once (serving/atomic_dir.py)."""

import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from serving.atomic_dir import FOREIGN_IDLE_S, ForeignFolder, building, owner_tag, sweep
from tests.namespaces import in_another_pid_namespace

OURS = {"done", "marker"}.__contains__  # what the builders in these tests write


def _build(final: str, marker: str, delay_s: float, barrier) -> None:
    import time

    with building(__import__("pathlib").Path(final), lambda done: (done / "done").is_file(), OURS) as tmp:
        barrier.wait()  # both are building now
        time.sleep(delay_s)
        (tmp / "marker").write_text(marker)
        (tmp / "done").write_text("")


def test_two_builders_at_once_keep_the_first_to_finish_and_neither_fails(tmp_path):
    """Two agents sharing a cache exported into one `.partial` folder, each deleting it first: one crashed."""
    final = tmp_path / "export"
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    builders = [ctx.Process(target=_build, args=(str(final), m, d, barrier)) for m, d in (("fast", 0.0), ("slow", 0.5))]
    for p in builders:
        p.start()
    for p in builders:
        p.join(timeout=60)
    assert [p.exitcode for p in builders] == [0, 0]
    assert (final / "marker").read_text() == "fast"  # the slow one found a whole folder there and dropped its own
    assert sorted(x.name for x in tmp_path.iterdir()) == ["export"]  # no partial folder left


def test_a_failed_build_leaves_nothing_and_a_stale_folder_is_replaced(tmp_path):
    final = tmp_path / "model"
    with pytest.raises(RuntimeError), building(final, lambda done: False, OURS) as tmp:
        (tmp / "half").write_text("x")
        raise RuntimeError("killed midway")
    assert list(tmp_path.iterdir()) == []
    final.mkdir()
    (final / "marker").write_text("old")
    with building(final, lambda done: (done / "done").is_file(), OURS) as tmp:
        (tmp / "done").write_text("")
    assert sorted(x.name for x in final.iterdir()) == ["done"]


def test_folders_of_builders_that_died_are_swept_and_a_living_ones_kept(tmp_path):
    final = tmp_path / "model"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f"model.partial-{int(dead.stdout)}-abcdef"
    living = tmp_path / f"model.partial-{owner_tag()}-abcdef"
    legacy = tmp_path / "model.partial"  # the one name older versions used
    # PID 1 in a container is always alive, but a restarted one started later: its folder is a dead builder's
    restarted = tmp_path / f"model.partial-{os.getpid()}-1-abcdef"
    for path in (gone, living, legacy, restarted):
        path.mkdir()
    sweep(final)
    assert sorted(x.name for x in tmp_path.iterdir()) == [living.name]


@pytest.mark.parametrize("named", ["notes", "model.safetensors", ".git"])
def test_a_folder_holding_what_the_builder_does_not_write_is_refused_untouched(tmp_path, named):
    """`tandem edge export CKPT mydir` emptied mydir (a user's notes; the checkpoint itself, as its own output)."""
    final = tmp_path / "mydir"
    final.mkdir()
    (final / named).write_text("mine")
    (final / "marker").write_text("an older build's")
    ran = []
    with pytest.raises(ForeignFolder, match=rf"{final} already holds {named}, which this does not write"):
        with building(final, lambda done: False, OURS):
            ran.append(True)
    assert not ran  # refused before any work
    assert sorted(p.name for p in final.iterdir()) == sorted([named, "marker"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mydir"]


def test_a_file_browsers_litter_does_not_keep_a_stale_build_from_being_replaced(tmp_path):
    final = tmp_path / "model"
    final.mkdir()
    (final / ".DS_Store").write_bytes(b"\0")
    (final / "marker").write_text("stale")
    with building(final, lambda done: False, OURS) as tmp:
        (tmp / "done").write_text("")
    assert sorted(p.name for p in final.iterdir()) == ["done"]


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)


def test_a_users_folders_named_like_partial_ones_are_never_swept(tmp_path):
    """`tandem edge export CKPT out` deleted the user's `out.partial-notes`, `out.partials` and `out.partial copy`
    (a review): only a builder's own names are swept."""
    theirs = [
        "out.partial-notes",
        "out.partials",
        "out.partial copy",
        "out.partial-1-abcdef-mine",
        "out.partial-x-abcdef",
    ]
    for name in theirs:
        (tmp_path / name).mkdir()
        (tmp_path / name / "notes.txt").write_text("mine")
    dead = tmp_path / f"out.partial-{_dead_pid()}-abcdef"
    dead.mkdir()
    sweep(tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(theirs)


def test_the_partial_folder_of_a_name_holding_glob_characters_is_swept(tmp_path):
    """`k [2]` was globbed as a character class: a killed export's `k [2].partial-…` stayed for ever (a review)."""
    dead = tmp_path / f"k [2].partial-{_dead_pid()}-abcdef"
    dead.mkdir()
    other = tmp_path / f"k 2.partial-{_dead_pid()}-abcdef"  # what the glob matched instead: another folder's
    other.mkdir()
    sweep(tmp_path / "k [2]")
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name]


def test_a_folder_of_another_pid_namespace_is_swept_only_when_untouched_for_long(tmp_path):
    """Containers sharing a host folder each have their own PIDs: PID 1 there is alive here but another process,
    and a PID running there may not run here at all (a review). Their folders are judged by their age alone."""
    here = owner_tag().rpartition("-n")[2]
    if not here.isdigit():
        pytest.skip("no /proc/self/ns/pid here: tags name no namespace")
    other = str(int(here) + 1)
    fresh = tmp_path / f"model.partial-1-5-n{other}-abcdef"
    stale = tmp_path / f"model.partial-{_dead_pid()}-5-n{other}-abcdef"
    ours_dead = tmp_path / f"model.partial-{_dead_pid()}-5-n{here}-abcdef"
    for path in (fresh, stale, ours_dead):
        (path / "sub").mkdir(parents=True)
        (path / "sub" / "weights").write_bytes(b"half")
    long_ago = time.time() - FOREIGN_IDLE_S - 60
    for path in (stale, stale / "sub", stale / "sub" / "weights"):
        os.utime(path, (long_ago, long_ago))
    os.utime(fresh, (long_ago, long_ago))  # the folder is old, but a file in it is being written
    sweep(tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == [fresh.name]


UNSHARED_BUILDER = """
import sys
from pathlib import Path
from serving.atomic_dir import owner_tag
partial = Path(sys.argv[1]) / f"model.partial-{owner_tag()}-abcdef"
partial.mkdir()
(partial / "marker").write_text("building")
print(partial.name, flush=True)
sys.stdin.read()
"""


def test_a_build_running_in_another_pid_namespace_survives_a_sweep(tmp_path):
    """The review's repro: a builder under `unshare --pid` (a container) is PID 1 there; judged here, PID 1 is
    another process that started at another time, so its folder was deleted under it."""
    builder = in_another_pid_namespace(UNSHARED_BUILDER, str(tmp_path))
    try:
        name = builder.stdout.readline().strip()
        assert name.startswith("model.partial-1-")
        sweep(tmp_path / "model")
        assert (tmp_path / name / "marker").read_text() == "building"
    finally:
        builder.communicate("", timeout=30)

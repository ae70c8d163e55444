"""The per-entry lock of the model cache (flock on `ENTRY.lock`): shared while a process uses an entry (a running
worker holds its model for its life), exclusive while one installs, replaces or evicts it."""

import fcntl
import logging
import time

from tandem.model_store.reference import StoreError

log = logging.getLogger(__name__)

POLL_S = 0.2


def lock(fd: int, kind: int, waiting_for: str) -> None:
    """flock, saying so when it has to wait (a wait without a word looked like a hang)."""
    if not try_lock(fd, kind):
        log.warning("waiting: %s", waiting_for)
        fcntl.flock(fd, kind)


def upgrade(fd: int, waiting_for: str, installing: str, timeout_s: float) -> bool:
    """From the shared lock this process holds to the exclusive one. True: held exclusive. False: another process
    took it exclusive meanwhile (an install of the same entry, an eviction) and has let go; this one holds it shared
    again and should look at the entry again. Only while shared holders alone keep it (running servers) does
    `timeout_s` run: StoreError naming `waiting_for` past it. An install, however long, is waited for (a review:
    two fetches started together, and the one that lost gave up after 60 s of the other's download)."""
    if try_lock(fd, fcntl.LOCK_EX):
        return True
    # A failed conversion has dropped the shared lock (Linux converts by letting go, then taking).
    deadline, polls = time.monotonic() + timeout_s, 0
    while True:
        if not try_lock(fd, fcntl.LOCK_SH):
            lock(fd, fcntl.LOCK_SH, installing)
            return False
        # Wait holding nothing: two fetches each holding the shared lock would keep each other out forever.
        fcntl.flock(fd, fcntl.LOCK_UN)
        polls += 1
        if polls == 2:  # not at once: a fetch started alongside takes it first, and this one waits for its install
            log.warning("waiting (at most %.0f s): %s", timeout_s, waiting_for)
        if time.monotonic() > deadline:
            raise _held_too_long(waiting_for, timeout_s)
        time.sleep(POLL_S)
        if try_lock(fd, fcntl.LOCK_EX):
            return True


def try_lock(fd: int, kind: int) -> bool:
    """flock without waiting: False where another open file holds it the other way."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _held_too_long(waiting_for: str, timeout_s: float) -> StoreError:
    return StoreError(
        f"{waiting_for} by another process, which did not let go within {timeout_s:.0f} s: stop the processes "
        "serving it (`fuser` on its .lock file names them), then fetch again"
    )

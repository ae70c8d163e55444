"""Live policy reload: watch the file, swap in a valid policy atomically, keep the old one otherwise.

The directory is watched, not the file: editors save by renaming and
Kubernetes ConfigMaps swap a symlink, and either shows as a change there.
A request reads `state.policy` once, so in-flight requests finish on the
policy they started with.
"""

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from watchfiles import awatch

from gateway import metrics, privacy
from gateway.policy.loader import PolicyError, parse_policy, read_policy_text

log = logging.getLogger(__name__)

# A file written in place (`cat > policy.yaml`, an editor that does not rename) is read while it changes: its first
# half can be valid YAML that lacks what follows (a `never_leave_device` list cut short). It is parsed only once two
# reads this far apart agree, a second change then no longer looked for after SETTLE_MAX_S.
SETTLE_S = 0.25
SETTLE_MAX_S = 2.0


@dataclass
class PolicyStatus:
    path: Path
    sha256: str
    loaded_at: float
    last_error: str | None = None

    def as_dict(self) -> dict:
        return {
            "file": str(self.path),
            "sha256": self.sha256,  # of the text, as `sha256sum` gives it for a file saved without a BOM
            "loaded_at": self.loaded_at,
            "last_error": self.last_error,
        }


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class PolicyReloader:
    def __init__(self, state) -> None:
        self._state = state
        self._rejected: str | None = None  # the digest of the last file refused: not reported again until it changes
        # The last failure to read the file (gone, not UTF-8): counted and logged once, not again as the watch
        # re-arms on the same file (one edit was two rejections; a review)
        self._unreadable: str | None = None

    async def run(self) -> None:
        """Watch the file (watch_file); a failure of one reload is logged and the watch goes on (a watcher that died
        would leave every later edit unread, silently)."""
        path = self._state.policy_status.path
        await watch_file(path, lambda: self._reload_logged(path), "policy")

    async def _reload_logged(self, path: Path) -> None:
        try:
            await self.reload()
        except Exception:  # noqa: BLE001 - the watch must outlive any one edit
            log.exception("policy reload failed; the previous policy keeps serving")
            self._state.policy_status.last_error = f"{path}: reload failed; see the gateway log"
            metrics.POLICY_RELOADS.labels("error").inc()  # a rejection all the same, as alerts count them

    async def reload(self) -> bool:
        """Load the file if its content changed; True when a new policy now serves."""
        status = self._state.policy_status
        try:
            text = await settled_text(status.path)
        except PolicyError as exc:
            if str(exc) == self._unreadable:  # the same failure seen again (the watch re-armed): one rejection
                return False
            self._unreadable = str(exc)
            return self._reject(str(exc))
        self._unreadable = None
        new_digest = digest(text)
        if new_digest == status.sha256:  # the serving policy's own text again (a refused edit undone)
            status.last_error, self._rejected = None, None
            return False
        if new_digest == self._rejected:
            return False
        try:  # off the event loop: a large file takes a while, and requests go on meanwhile
            policy = await asyncio.to_thread(parse_policy, text, str(status.path))
            self._state.check_models(policy)
        except (PolicyError, ValueError) as exc:
            self._rejected = new_digest  # /readyz's sha256 stays the serving policy's
            return self._reject(f"{status.path}: {exc}" if not isinstance(exc, PolicyError) else str(exc))
        self._rejected = None
        await self._state.registry.apply(policy)
        self._state.policy = policy
        self._state.policy_status = PolicyStatus(status.path, new_digest, time.time())
        metrics.POLICY_RELOADS.labels("ok").inc()
        if warning := privacy.detection_warning(policy):
            log.warning("%s", warning)
        log.info(
            "policy reloaded from %s (sha256 %s): %d pools, %d rules",
            status.path,
            new_digest[:16],
            len(policy.pools),
            len(policy.rules),
        )
        return True

    def _reject(self, error: str) -> bool:
        self._state.policy_status.last_error = error
        metrics.POLICY_RELOADS.labels("error").inc()
        log.error("policy change rejected, the previous policy keeps serving:\n%s", error)
        return False


POLL_S = 2.0  # how often the watched files' and folders' identities are compared, besides the events


async def watch_file(path: Path, changed: Callable[[], Awaitable[None]], what: str) -> None:
    """Await `changed()` after each change of the file at `path`, for ever (`changed` must not raise). The directory
    is watched, and its target's where it is a symlink elsewhere; a folder that is not there (a link into one not
    made yet) is watched from the nearest one that is; and every POLL_S the files' and folders' identities are
    compared as well, so a folder deleted and made anew (whose old watch hears nothing more) or a missed event is
    caught within that: both stopped reloads for good."""
    again = False
    while True:  # watched anew whenever the links or the folders change
        chain, folders, names = await asyncio.to_thread(_watched, path)
        seen = await asyncio.to_thread(_identity, chain, folders)
        if again:  # what changed while no watch was on (the same text is no reload)
            await changed()
        again = True

        def ours(_change, name: str, names=names) -> bool:
            return Path(name).name in names

        try:
            async for changes in awatch(
                *folders,
                debounce=50,
                step=50,
                recursive=False,
                watch_filter=ours,
                rust_timeout=int(POLL_S * 1000),
                yield_on_timeout=True,
            ):
                now = await asyncio.to_thread(_identity, chain, folders)
                if changes or now != seen:
                    await changed()
                if now != seen or await asyncio.to_thread(_watched, path) != (chain, folders, names):
                    break
        except OSError as exc:  # a folder gone between looking and watching: looked for again
            log.warning("%s watch on %s: %s; watching again", what, ", ".join(map(str, folders)), exc)
            await asyncio.sleep(POLL_S)


def _watched(path: Path) -> tuple[list[Path], set[Path], set[str]]:
    """The policy's chain of links, the folders to watch (each link's, or the nearest that exists), and the names
    whose change there matters: the links', a ConfigMap's `..data` swap, and each missing folder on the way."""
    chain = link_chain(path)
    folders, names = set(), {link.name for link in chain} | {"..data"}
    for link in chain:
        folder = link.parent
        while not folder.is_dir() and folder != folder.parent:
            names.add(folder.name)  # made later: a change in the folder above
            folder = folder.parent
        folders.add(folder)
    return chain, folders, names


def _identity(chain: list[Path], folders: set[Path]) -> tuple:
    """What tells a file or folder from its replacement: device, inode, size and time of each (None where none)."""

    def of(path: Path):
        try:
            st = path.lstat()
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    return tuple(of(p) for p in chain), tuple((of(f) or (None, None))[:2] for f in sorted(folders))


def link_chain(path: Path, most: int = 40) -> list[Path]:
    """The path, each symlink it leads through one step at a time, and the file it ends at: a change of any of
    them changes what is read. A policy linked to a ConfigMap's file, itself a link into `..data` (two levels), had
    only its own folder and the final file's watched, and a `..data` swap between them was missed (a review)."""
    chain, seen = [path], {path}
    while chain[-1].is_symlink() and len(chain) <= most:
        step = chain[-1].parent / os.readlink(chain[-1])
        if step in seen:
            break
        chain.append(step)
        seen.add(step)
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a loop of links: reading the file says so
        return chain
    return chain if resolved in chain else [*chain, resolved]


async def settled_text(path: Path, read: Callable[[Path], str] = read_policy_text) -> str:
    """The file's text (`read`) once it has stopped changing (SETTLE_S); a writer still busy after SETTLE_MAX_S
    gets its text read as it stands, and its next write is a change of its own, read again."""
    # Off the event loop: a file on a mount that hangs stopped every request with it
    text, waited = await asyncio.to_thread(read, path), 0.0
    while waited < SETTLE_MAX_S:
        await asyncio.sleep(SETTLE_S)
        waited += SETTLE_S
        again = await asyncio.to_thread(read, path)
        if again == text:
            break
        text = again
    return text

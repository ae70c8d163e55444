"""The node-local cache and the shared tier: a reference resolved to a directory, installed whole, under locks,
evicted least recently used."""

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from serving.atomic_dir import owner_tag
from tandem.model_store import locks
from tandem.model_store.manifest import FileEntry, Manifest, file_sha256
from tandem.model_store.object_store import ObjectStore
from tandem.model_store.progress import Progress
from tandem.model_store.reference import (
    ENTRY_FILE,
    LAST_USED_FILE,
    ModelRef,
    StoreError,
    checked_digest,
    file_in,
    whole_number_from_env,
)

log = logging.getLogger(__name__)


@dataclass
class ModelStore:
    cache_dir: Path
    max_bytes: int | None = None  # None: unbounded
    shared_dir: Path | None = None
    object_store_factory: Callable[[], ObjectStore] = ObjectStore
    verify: str = "stamp"  # or "full": re-hash every file on every hit

    @classmethod
    def from_env(cls) -> "ModelStore":
        """The store the TANDEM_MODEL_* variables describe; StoreError, naming the variable, where one holds what it
        cannot mean (a review: `10GB` was a traceback, `-1` a bound of -0 MB, an empty directory the current one)."""
        cache_dir = os.environ.get("TANDEM_MODEL_CACHE_DIR")
        if cache_dir is not None and not cache_dir.strip():
            raise StoreError(f"TANDEM_MODEL_CACHE_DIR={cache_dir!r}: use a directory (unset: ~/.cache/tandem/models)")
        shared = os.environ.get("TANDEM_MODEL_SHARED_DIR")
        return cls(
            Path(cache_dir) if cache_dir else Path.home() / ".cache" / "tandem" / "models",
            whole_number_from_env("TANDEM_MODEL_CACHE_MAX_BYTES", "a whole number of bytes", 0, "no bound"),
            Path(shared) if shared else None,
            verify=os.environ.get("TANDEM_MODEL_VERIFY", "stamp"),
        )

    def __post_init__(self) -> None:
        if self.verify not in ("stamp", "full"):
            raise StoreError(f"TANDEM_MODEL_VERIFY={self.verify!r}: use stamp or full")
        self._object_store: ObjectStore | None = None
        self._held: dict[Path, int] = {}  # entry -> lock fd, shared, for as long as this store lives

    @property
    def objects(self) -> ObjectStore:
        if self._object_store is None:
            self._object_store = self.object_store_factory()
        return self._object_store

    # -- resolving ------------------------------------------------------------------------------

    def resolve(self, reference: str, only: Iterable[str] | None = None) -> Path:
        """A local checkpoint directory for `reference`; with `only`, just those files of it (e.g. a tokenizer)."""
        if not reference.strip():  # an unset variable, most likely: not the current directory
            raise StoreError("the model reference is empty: give a checkpoint directory or s3://bucket/path/to/model")
        if reference.startswith("demo://"):
            return self._demo(reference)
        ref = ModelRef.parse(reference)
        if ref is None:
            path = Path(reference)
            if not path.is_dir():
                raise StoreError(f"{reference}: no such directory (and not an s3:// model reference)")
            return path
        if ref.digest is None:
            key = ref.key("manifests", "latest")
            latest = self.objects.get_bytes(ref.bucket, key).decode("utf-8", "replace")
            ref = ref.pinned(checked_digest(latest, f"s3://{ref.bucket}/{key}"))
            log.warning("%s is not pinned: resolved the latest push to %s", reference, ref)
        only = tuple(sorted(only)) if only else None
        name = f"sha256-{ref.digest}" + (f"-{hashlib.sha256('/'.join(only).encode()).hexdigest()[:8]}" if only else "")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        entry = self.cache_dir / name
        fd = os.open(self.cache_dir / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._hold_whole(fd, ref, entry, only)
        except BaseException:
            os.close(fd)
            raise
        (entry / LAST_USED_FILE).touch()
        previous = self._held.pop(entry, None)
        if previous is not None:
            os.close(previous)
        self._held[entry] = fd  # kept: eviction by other processes skips entries someone holds
        self._evict(keep=entry)
        return entry

    def _hold_whole(self, fd: int, ref: ModelRef, entry: Path, only: tuple[str, ...] | None) -> None:
        """Returns holding `entry`'s lock (`fd`) shared, the entry whole: installed here where no other process
        had installed it. Fetches started together download once: the others wait for that install, however long."""
        installing = f"another process is installing or evicting {entry}"
        locks.lock(fd, fcntl.LOCK_SH, installing)
        while (problem := self._check(entry)) is not None:
            # Replacing it needs every other holder gone; a running worker holds its model for its life.
            if not locks.upgrade(fd, f"{entry} is unusable ({problem}) and in use", installing, REPLACE_WAIT_S):
                continue  # another process installed (or evicted) it meanwhile: look again
            problem = self._check(entry)  # it may have been installed between letting go and taking it
            if problem is not None:
                if entry.exists():
                    log.warning("cached %s is unusable (%s); fetching it again", entry, problem)
                self._install(ref, entry, only)
            fcntl.flock(fd, fcntl.LOCK_SH)
            return

    def _demo(self, reference: str) -> Path:
        """The demo checkpoint (the same bytes everywhere: its weights are seeded), built under a lock."""
        from tandem.demo_model import cached_demo_checkpoint

        name = reference.removeprefix("demo://")
        if name != "tandem-demo":
            raise StoreError(f"{reference!r}: the only demo model is demo://tandem-demo")
        directory = self.cache_dir / "demo"
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return cached_demo_checkpoint(directory / name)

    def release(self) -> None:
        """Let go of every entry this store resolved (they become evictable)."""
        for fd in self._held.values():
            os.close(fd)
        self._held.clear()

    def _check(self, entry: Path) -> str | None:
        """None when the entry is complete and unchanged since its install; else what is wrong."""
        try:
            record = json.loads((entry / ENTRY_FILE).read_text())
            manifest_json, mtime_ns = json.dumps(record["manifest"]).encode(), dict(record["mtime_ns"])
        except (OSError, ValueError, KeyError, TypeError):
            return "not installed" if not entry.exists() else "incomplete install"
        where = str(entry / ENTRY_FILE)
        manifest = Manifest.from_json(manifest_json, where)
        for f in manifest.files:
            path = file_in(entry, f.path, where)
            try:
                st = path.stat()
            except OSError:
                return f"{f.path} is missing"
            if st.st_size != f.size:
                return f"{f.path} has {st.st_size} bytes, the manifest says {f.size}"
            if self.verify == "stamp" and st.st_mtime_ns != mtime_ns.get(f.path):
                return f"{f.path} changed after it was installed"
            if self.verify == "full" and file_sha256(path) != f.sha256:
                return f"{f.path} fails its SHA-256 check"
        return None

    def _install(self, ref: ModelRef, entry: Path, only: tuple[str, ...] | None) -> None:
        """Build the entry in a temporary directory from the best tier, verify it, rename it into place."""
        self._remove_stale_temporaries(installing=entry)
        temporary = self.cache_dir / f".tmp-{entry.name}@{owner_tag()}"
        _remove(temporary)
        temporary.mkdir()
        try:
            manifest = self._fill(ref, temporary, only)
            record = {
                "reference": str(ref),
                "manifest": json.loads(manifest.to_json()),
                "mtime_ns": {f.path: file_in(temporary, f.path, str(ref)).stat().st_mtime_ns for f in manifest.files},
                "installed_at": time.time(),
            }
            (temporary / ENTRY_FILE).write_text(json.dumps(record))
            if entry.exists():
                self._discard(entry)
            temporary.rename(entry)  # atomic: readers see no entry or a whole one
        except BaseException:
            _remove(temporary)
            raise

    def _fill(self, ref: ModelRef, directory: Path, only: tuple[str, ...] | None) -> Manifest:
        shared = self.shared_dir / f"sha256-{ref.digest}" if self.shared_dir else None
        if shared is not None and (shared / ENTRY_FILE).is_file():
            full = Manifest.from_json(_entry_manifest(shared), str(shared))
            manifest = _select(full, only, ref)
            if full.digest != ref.digest:
                log.warning("%s holds a different manifest than %s; skipping it", shared, ref)
            else:
                print(f"copying {ref} from the shared file system {shared}", file=sys.stderr)
                if _copied(shared, directory, manifest):
                    return manifest
                for child in list(directory.iterdir()):
                    _remove(child)
        key = ref.key("manifests", f"sha256-{ref.digest}.json")
        data = self.objects.get_bytes(ref.bucket, key)
        if hashlib.sha256(data).hexdigest() != ref.digest:
            raise StoreError(f"s3://{ref.bucket}/{key} does not hash to the pinned digest {ref.digest}")
        where = f"s3://{ref.bucket}/{key}"
        manifest = _select(Manifest.from_json(data, where), only, ref)
        progress = Progress(str(ref), manifest.total_bytes)
        for f in manifest.files:
            target = file_in(directory, f.path, where)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.objects.download(ref.bucket, ref.key("blobs", f"sha256-{f.sha256}"), f.size, target, progress)
        elapsed = progress.finish()
        if (wrong := _mismatched(directory, manifest)) is not None:  # named: a review could not tell which
            raise StoreError(
                f"{ref}: {wrong.path} does not hash to its manifest's sha256: s3://{ref.bucket}/"
                f"{ref.key('blobs', f'sha256-{wrong.sha256}')} holds other bytes; delete that object and push the "
                "checkpoint again"
            )
        log.info("fetched %s (%.0f MB) in %.1f s", ref, manifest.total_bytes / 2**20, elapsed)
        return manifest

    # -- housekeeping -----------------------------------------------------------------------------

    def _discard(self, entry: Path) -> None:
        """Out of its name at once (a rename), then deleted: a name of its own each time, so trash a killed process
        left behind never blocks the next (the same PID, 1, in every container start)."""
        trash = self.cache_dir / f".trash-{entry.name}@{owner_tag()}-{secrets.token_hex(4)}"
        entry.rename(trash)
        _remove(trash)

    def _remove_stale_temporaries(self, installing: Path) -> None:
        """Temporaries of installs that stopped midway (`.tmp-ENTRY@TAG`; `.tmp-ENTRY-PID` from older versions),
        and trash a killed process left: never read, and nothing else would count their bytes.

        An install holds its entry's lock exclusive for as long as its temporary exists, so a temporary whose entry
        nobody holds exclusive is a dead install's, whichever container it ran in (a review: judged by its PID, a
        download running in another PID namespace was deleted under it). This process holds `installing`'s lock: any
        temporary of it is a dead one's. Names of neither form are left alone."""
        for path in self.cache_dir.glob(".trash-*"):
            _remove(path)
        for path in self.cache_dir.glob(".tmp-*"):
            match = _TEMPORARY.fullmatch(path.name)
            if match is None:
                continue
            if match["entry"] == installing.name:
                _remove(path)
                continue
            fd = os.open(self.cache_dir / f"{match['entry']}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if locks.try_lock(fd, fcntl.LOCK_SH):  # held while removing: no install of it starts meanwhile
                    _remove(path)
            finally:
                os.close(fd)

    def _evict(self, keep: Path) -> None:
        """Remove least recently used entries no process holds until the cache fits `max_bytes`."""
        if self.max_bytes is None:
            return
        entries = [(p, _entry_bytes(p)) for p in self.cache_dir.glob("sha256-*") if (p / ENTRY_FILE).is_file()]
        total = sum(size for _, size in entries)
        by_age = sorted(entries, key=lambda e: _last_used(e[0]))
        for path, size in by_age:
            if total <= self.max_bytes:
                return
            if path == keep or path in self._held:
                continue
            fd = os.open(self.cache_dir / f"{path.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            if not locks.try_lock(fd, fcntl.LOCK_EX):
                os.close(fd)
                continue  # in use by a running process
            try:
                self._discard(path)
                total -= size
                log.info("evicted %s (%.0f MB) from the model cache", path.name, size / 2**20)
            finally:
                os.close(fd)
        if total > self.max_bytes:
            log.warning(
                "model cache %s holds %.0f MB, over its bound of %.0f MB: the rest is in use",
                self.cache_dir,
                total / 2**20,
                self.max_bytes / 2**20,
            )


REPLACE_WAIT_S = 60.0  # how long a damaged entry's other holders get to let go before its fetch gives up

# A temporary: `.tmp-ENTRY@TAG` (serving/atomic_dir.owner_tag), or `.tmp-ENTRY-PID` from older versions.
_TEMPORARY = re.compile(r"\.tmp-(?P<entry>sha256-[0-9a-f]{64}(?:-[0-9a-f]{8})?)(?:@.+|-\d+)")


def _select(manifest: Manifest, only: tuple[str, ...] | None, ref: ModelRef) -> Manifest:
    if not only:
        return manifest
    chosen = manifest.only(only)
    if not chosen.files:
        raise StoreError(f"{ref} has none of {list(only)}")
    return chosen


def _entry_manifest(entry: Path) -> bytes:
    try:
        return json.dumps(json.loads((entry / ENTRY_FILE).read_text())["manifest"]).encode()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"{entry / ENTRY_FILE}: not a Tandem cache entry ({exc})") from exc


def _copied(shared: Path, directory: Path, manifest: Manifest) -> bool:
    """Copy the files of `manifest` from the shared tier's entry into `directory`; False (the caller goes to the
    object store) where one is missing or unreadable there, or does not match its manifest."""
    where = str(shared / ENTRY_FILE)
    sources = [file_in(shared, f.path, where) for f in manifest.files]  # all checked before copying
    try:
        for f, source in zip(manifest.files, sources, strict=True):
            target = file_in(directory, f.path, where)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    except OSError as exc:  # a review: one file gone from the shared entry crashed the fetch
        log.warning("%s cannot be copied (%s); fetching from the object store", shared, exc)
        return False
    if _mismatched(directory, manifest) is None:
        return True
    log.warning("%s does not match its manifest; fetching from the object store", shared)
    return False


def _remove(path: Path) -> None:
    """A folder and all in it, or a file or link (an entry's name holding one): whatever is there, gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _mismatched(directory: Path, manifest: Manifest) -> FileEntry | None:
    """The first file in `directory` that does not hash to its manifest's digest; None where all do."""
    files = list(manifest.files)
    with ThreadPoolExecutor(min(8, max(1, len(files)))) as pool:  # hashlib releases the GIL on large buffers
        hashes = list(pool.map(lambda f: file_sha256(file_in(directory, f.path, str(directory))), files))
    return next((f for h, f in zip(hashes, files, strict=True) if h != f.sha256), None)


def _entry_bytes(entry: Path) -> int:
    return sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())


def _last_used(entry: Path) -> float:
    try:
        return (entry / LAST_USED_FILE).stat().st_mtime
    except OSError:
        return 0.0

"""Tiered model store: a model reference becomes a local checkpoint directory.

A reference is a local directory (used as it is) or an object-store address:

    s3://bucket/models/llama-3-8b@sha256:<manifest digest>   pinned
    s3://bucket/models/llama-3-8b                            the version last pushed (logged as unpinned)
    demo://tandem-demo                                       the deterministic demo checkpoint, built here once

It resolves through three tiers, fastest first:

1. the node-local cache (`TANDEM_MODEL_CACHE_DIR`: an NVMe or RAM-disk directory), one directory per
   manifest digest, bounded in size (`TANDEM_MODEL_CACHE_MAX_BYTES`) by evicting the least recently used
   entry that no running process holds;
2. a shared file system (`TANDEM_MODEL_SHARED_DIR`, e.g. NFS) laid out like the cache, copied from;
3. the object store (S3-compatible; `AWS_ENDPOINT_URL` for MinIO, Ceph, R2 …), read with parallel ranged GETs.

Under the model's prefix the object store holds `manifests/sha256-<digest>.json` (every file's path, size and
SHA-256; the digest is the SHA-256 of that JSON), `manifests/latest` (the digest last pushed) and
`blobs/sha256-<file hash>`. `tandem model push` writes them.

Every install is checked against the manifest, built in a temporary directory and renamed into place, under
an exclusive lock per digest: several workers on one node download once, and none sees half a model. A cache
hit checks each file's size and modification time against what was installed (a changed file is re-fetched);
`verify="full"` re-hashes everything. Processes that serve a model hold a shared lock on its entry, so eviction
never removes a model in use.
"""

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from urllib.parse import urlparse

log = logging.getLogger(__name__)

ENTRY_FILE = ".tandem-entry.json"  # in a cache entry: the manifest and the install stamps
LAST_USED_FILE = ".last-used"
PART_BYTES = 16 * 2**20  # one ranged GET
HASH_CHUNK = 8 * 2**20
TOKENIZER_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


class StoreError(Exception):
    """A reference that cannot be resolved; the message says why and what to do."""


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(value: object) -> bool:
    """Exactly 64 lowercase hex digits: the only form a digest may take in a path, an object key or a reference."""
    return isinstance(value, str) and _SHA256_HEX.fullmatch(value) is not None


def checked_digest(value: object, where: str) -> str:
    """A digest read from `where` (an object, a file, a name), without surrounding whitespace; StoreError if it
    is not a SHA-256 hex digest, before it can become part of a path, a key or a reference."""
    digest = value.strip() if isinstance(value, str) else value
    if not is_sha256_hex(digest):
        raise StoreError(f"{where} holds {_shown(value)}, not a sha256 digest (64 lowercase hex digits)")
    return digest


def _shown(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def checked_name(name: object, where: str) -> str:
    """A manifest's file name, when it is a normalized relative POSIX path that cannot leave its folder by its
    spelling (no absolute path, no `..`, no backslash or drive letter, no NUL, not empty); else StoreError.

    Symlinks already in a folder are checked where the name meets the folder: `file_in`.
    """
    if not isinstance(name, str) or not name:
        problem = "an empty name" if name == "" else "not a string"
    elif "\0" in name:
        problem = "a NUL byte in it"
    elif "\\" in name or PureWindowsPath(name).drive:
        problem = "a Windows path (backslash or drive); manifests use relative paths with /"
    elif PurePosixPath(name).is_absolute():
        problem = "an absolute path"
    elif ".." in PurePosixPath(name).parts:
        problem = "a .. component"
    elif name == "." or PurePosixPath(name).as_posix() != name:
        problem = "not a normalized relative path"
    else:
        return name
    raise StoreError(f"{where}: unsafe path {_shown(name)} in the manifest ({problem})")


def file_in(directory: Path, name: str, where: str) -> Path:
    """`directory / name`, checked: a safe name (`checked_name`) that, following any symlink already there,
    stays inside `directory`; else StoreError. Every manifest path is joined to a folder through this."""
    path = directory / checked_name(name, where)
    try:
        inside = directory.resolve() in path.resolve().parents
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        inside = False
    if not inside:
        raise StoreError(f"{where}: unsafe path {name!r} in the manifest (it leads outside {directory})")
    return path


@dataclass(frozen=True)
class ModelRef:
    bucket: str
    prefix: str  # the model's prefix in the bucket, no trailing slash
    digest: str | None  # manifest digest (hex); None: the latest pushed

    @classmethod
    def parse(cls, text: str) -> "ModelRef | None":
        """The reference, or None for a local path."""
        if not text.startswith("s3://"):
            return None
        address, _, pin = text.partition("@")
        parsed = urlparse(address)
        prefix = parsed.path.strip("/")
        if not parsed.netloc or not prefix:
            raise StoreError(f"{text!r}: expected s3://bucket/path/to/model[@sha256:<digest>]")
        digest = None
        if pin:
            algorithm, _, digest = pin.partition(":")
            if algorithm != "sha256" or not is_sha256_hex(digest):
                raise StoreError(f"{text!r}: the pin must be @sha256:<64 lowercase hex digits>")
        return cls(parsed.netloc, prefix, digest)

    def __post_init__(self) -> None:
        if self.digest is not None and not is_sha256_hex(self.digest):  # a backstop: callers check at the source
            raise StoreError(f"s3://{self.bucket}/{self.prefix}: digest {_shown(self.digest)} is not a sha256 digest")

    def pinned(self, digest: str) -> "ModelRef":
        return ModelRef(self.bucket, self.prefix, digest)

    def key(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts])

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" + (f"@sha256:{self.digest}" if self.digest else "")


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, with /
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...]

    def to_json(self) -> bytes:
        """Canonical bytes: the digest is their SHA-256, so the same files always give the same digest."""
        body = {"format": 1, "files": [vars(f) for f in sorted(self.files, key=lambda f: f.path)]}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "Manifest":
        try:
            body = json.loads(data)
            if body.get("format") != 1:
                raise StoreError(f"{where}: manifest format {body.get('format')!r}; this Tandem reads format 1")
            files = [(f["path"], int(f["size"]), f["sha256"]) for f in body["files"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"{where}: not a Tandem model manifest ({exc})") from exc
        return cls(
            tuple(
                FileEntry(checked_name(path, where), size, checked_digest(sha256, f"{where}: the sha256 of {path!r}"))
                for path, size, sha256 in files
            )
        )

    @classmethod
    def of_directory(cls, directory: Path) -> "Manifest":
        files = [p for p in sorted(directory.rglob("*")) if p.is_file() and not _hidden(p.relative_to(directory))]
        if not files:
            raise StoreError(f"{directory}: no files to push")
        with ThreadPoolExecutor(min(8, len(files))) as pool:
            hashes = list(pool.map(file_sha256, files))
        return cls(
            tuple(
                FileEntry(p.relative_to(directory).as_posix(), p.stat().st_size, h)
                for p, h in zip(files, hashes, strict=True)
            )
        )

    def only(self, names: Iterable[str]) -> "Manifest":
        wanted = set(names)
        return Manifest(tuple(f for f in self.files if f.path in wanted))


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class Progress:
    """`fetching … 120/480 MB (95 MB/s)` on stderr, at most once a second, and a last line when done."""

    def __init__(self, what: str, total_bytes: int, stream=None) -> None:
        self.what, self.total, self.done = what, total_bytes, 0
        self._stream = stream or sys.stderr
        self._started = self._shown = time.monotonic()

    def add(self, n: int) -> None:
        self.done += n  # from several threads; an int += under the GIL is close enough for a progress line
        now = time.monotonic()
        if now - self._shown >= 1.0:
            self._shown = now
            self._print(now)

    def finish(self) -> float:
        elapsed = time.monotonic() - self._started
        self._print(time.monotonic(), final=True)
        return elapsed

    def _print(self, now: float, final: bool = False) -> None:
        mb = 2**20
        rate = self.done / mb / max(now - self._started, 1e-6)
        verb = "fetched" if final else "fetching"
        print(f"{verb} {self.what}: {self.done / mb:.0f}/{self.total / mb:.0f} MB ({rate:.0f} MB/s)", file=self._stream)


class ObjectStore:
    """S3-compatible object store through boto3; the endpoint and credentials come from the AWS_* variables."""

    def __init__(
        self, endpoint_url: str | None = None, max_workers: int | None = None, part_bytes: int = PART_BYTES
    ) -> None:
        import boto3
        from botocore.config import Config

        max_workers = max_workers or int(os.environ.get("TANDEM_MODEL_FETCH_STREAMS", "8"))
        if max_workers < 1:
            raise StoreError(f"TANDEM_MODEL_FETCH_STREAMS={max_workers}: use 1 or more")
        self.max_workers, self.part_bytes = max_workers, part_bytes
        config = Config(max_pool_connections=max_workers * 2, retries={"max_attempts": 5, "mode": "standard"})
        self._s3 = boto3.client(
            "s3",
            endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None,
            region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
            config=config,
        )

    def get_bytes(self, bucket: str, key: str) -> bytes:
        try:
            return self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except Exception as exc:  # noqa: BLE001 - botocore raises many kinds; all mean "cannot read it"
            raise StoreError(f"s3://{bucket}/{key}: {_describe(exc)}") from exc

    def exists(self, bucket: str, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=bucket, Key=key)
            return True
        except Exception:  # noqa: BLE001 - absent, or unreadable: either way, write it
            return False

    def download(self, bucket: str, key: str, size: int, dest: Path, progress: Progress) -> None:
        """Ranged GETs in parallel, each written at its offset of a preallocated file.

        Parts are at least `part_bytes` and at most one per worker: enough streams to fill the link, and few
        requests (some S3-compatible servers pay for the whole object on every ranged GET).
        """
        part_bytes = max(self.part_bytes, -(-size // self.max_workers))
        with open(dest, "wb") as f:
            f.truncate(size)
            fd = f.fileno()

            def part(offset: int) -> None:
                end = min(offset + part_bytes, size)
                whole = offset == 0 and end == size  # one part: a plain GET, no Range
                ranged = {} if whole else {"Range": f"bytes={offset}-{end - 1}"}
                body = self._s3.get_object(Bucket=bucket, Key=key, **ranged)["Body"]
                position = offset
                for chunk in body.iter_chunks(HASH_CHUNK):  # streamed: a part never sits whole in memory
                    os.pwrite(fd, chunk, position)
                    position += len(chunk)
                    progress.add(len(chunk))
                if position != end:
                    raise StoreError(
                        f"s3://{bucket}/{key}: short read of bytes {offset}-{end - 1} ({position - offset})"
                    )

            try:
                with ThreadPoolExecutor(self.max_workers) as pool:
                    list(pool.map(part, range(0, size, part_bytes)))
            except StoreError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise StoreError(f"s3://{bucket}/{key}: {_describe(exc)}") from exc

    def put_file(self, bucket: str, key: str, path: Path) -> None:
        from boto3.s3.transfer import TransferConfig

        config = TransferConfig(multipart_chunksize=self.part_bytes, max_concurrency=self.max_workers)
        self._s3.upload_file(str(path), bucket, key, Config=config)

    def put_bytes(self, bucket: str, key: str, data: bytes) -> None:
        self._s3.put_object(Bucket=bucket, Key=key, Body=data)


def _describe(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        return f"{error.get('Code')}: {error.get('Message') or 'no message'}"
    return str(exc) or type(exc).__name__


def push(directory: Path, address: str, store: ObjectStore | None = None) -> ModelRef:
    """Upload a checkpoint directory (blobs not already there, then its manifest); return the pinned reference."""
    ref = ModelRef.parse(address)
    if ref is None or ref.digest:
        raise StoreError(f"{address!r}: push to an unpinned s3://bucket/path/to/model address")
    store = store or ObjectStore()
    manifest = Manifest.of_directory(directory)
    for f in manifest.files:
        key = ref.key("blobs", f"sha256-{f.sha256}")
        if not store.exists(ref.bucket, key):
            print(f"uploading {f.path} ({f.size / 2**20:.0f} MB)", file=sys.stderr)
            store.put_file(ref.bucket, key, directory / f.path)
    store.put_bytes(ref.bucket, ref.key("manifests", f"sha256-{manifest.digest}.json"), manifest.to_json())
    store.put_bytes(ref.bucket, ref.key("manifests", "latest"), manifest.digest.encode())
    return ref.pinned(manifest.digest)


@dataclass
class ModelStore:
    cache_dir: Path
    max_bytes: int | None = None  # None: unbounded
    shared_dir: Path | None = None
    object_store_factory: Callable[[], ObjectStore] = ObjectStore
    verify: str = "stamp"  # or "full": re-hash every file on every hit

    @classmethod
    def from_env(cls) -> "ModelStore":
        max_bytes = os.environ.get("TANDEM_MODEL_CACHE_MAX_BYTES")
        shared = os.environ.get("TANDEM_MODEL_SHARED_DIR")
        return cls(
            Path(os.environ.get("TANDEM_MODEL_CACHE_DIR", Path.home() / ".cache" / "tandem" / "models")),
            int(max_bytes) if max_bytes else None,
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
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits while another process installs or evicts it
            problem = self._check(entry)
            if problem is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
                problem = self._check(entry)  # another process may have installed it meanwhile
                if problem is not None:
                    if entry.exists():
                        log.warning("cached %s is unusable (%s); fetching it again", entry, problem)
                    self._install(ref, entry, only)
                fcntl.flock(fd, fcntl.LOCK_SH)
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
        self._remove_stale_temporaries()
        temporary = self.cache_dir / f".tmp-{entry.name}-{os.getpid()}"
        shutil.rmtree(temporary, ignore_errors=True)
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
                trash = self.cache_dir / f".trash-{entry.name}-{os.getpid()}"
                entry.rename(trash)
                shutil.rmtree(trash, ignore_errors=True)
            temporary.rename(entry)  # atomic: readers see no entry or a whole one
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
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
                where = str(shared / ENTRY_FILE)
                sources = [file_in(shared, f.path, where) for f in manifest.files]  # all checked before copying
                for f, source in zip(manifest.files, sources, strict=True):
                    target = file_in(directory, f.path, where)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, target)
                if _verified(directory, manifest):
                    return manifest
                log.warning("%s does not match its manifest; fetching from the object store", shared)
                for child in list(directory.iterdir()):
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
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
        if not _verified(directory, manifest):
            raise StoreError(f"{ref}: downloaded files do not match the manifest (object store corrupt?)")
        log.info("fetched %s (%.0f MB) in %.1f s", ref, manifest.total_bytes / 2**20, elapsed)
        return manifest

    # -- housekeeping -----------------------------------------------------------------------------

    def _remove_stale_temporaries(self) -> None:
        """Temporaries of processes that died mid-install."""
        for path in self.cache_dir.glob(".tmp-*"):
            pid = path.name.rsplit("-", 1)[-1]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)

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
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # in use by a running process
            try:
                trash = self.cache_dir / f".trash-{path.name}-{os.getpid()}"
                path.rename(trash)
                shutil.rmtree(trash, ignore_errors=True)
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


def _verified(directory: Path, manifest: Manifest) -> bool:
    files = list(manifest.files)
    with ThreadPoolExecutor(min(8, max(1, len(files)))) as pool:  # hashlib releases the GIL on large buffers
        hashes = list(pool.map(lambda f: file_sha256(file_in(directory, f.path, str(directory))), files))
    return all(h == f.sha256 for h, f in zip(hashes, files, strict=True))


def _entry_bytes(entry: Path) -> int:
    return sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())


def _last_used(entry: Path) -> float:
    try:
        return (entry / LAST_USED_FILE).stat().st_mtime
    except OSError:
        return 0.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

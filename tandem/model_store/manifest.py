"""A model's manifest: every file's path, size and SHA-256; its digest pins the model."""

import hashlib
import json
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tandem.model_store.reference import HASH_CHUNK, StoreError, checked_digest, checked_name


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
        manifest = cls(
            tuple(
                FileEntry(checked_name(path, where), size, checked_digest(sha256, f"{where}: the sha256 of {path!r}"))
                for path, size, sha256 in files
            )
        )
        if problem := manifest._problem():
            raise StoreError(f"{where}: not a manifest push writes ({problem})")
        return manifest

    def _problem(self) -> str | None:
        """What a manifest `push` never writes holds (a review: `a` beside `a/b` was a traceback, an entry's own
        `.last-used` named in it made every start fetch again, and one of no files installed as a model)."""
        if not self.files:
            return "no files"
        paths = {f.path for f in self.files}
        for path in sorted(paths):
            if _hidden(Path(path)):
                return f"{path!r}: push leaves out names starting with '.'"
            parents = [parent.as_posix() for parent in Path(path).parents if str(parent) != "."]
            if clash := next((parent for parent in parents if parent in paths), None):
                return f"{clash!r} is a file and a folder"
        return None

    @classmethod
    def of_directory(cls, directory: Path, stamps: dict[str, tuple[int, int]] | None = None) -> "Manifest":
        """Every file in `directory` (but names starting with '.'), hashed; `stamps` gets each one's size and
        modification time as they were before it was read, for `push` to tell a file written meanwhile.
        StoreError for what push cannot take whole: a link that leads nowhere or to a folder, a pipe or device,
        a file it may not read (a review: each was left out without a word, or a traceback)."""
        files = _files_in(directory)
        if not files:
            raise StoreError(f"{directory}: no files to push")
        if not (directory / "config.json").is_file():
            raise StoreError(f"{directory}: not a checkpoint (no config.json); push a model's folder")
        stamped = {p: file_stamp(p) for p in files}
        try:
            with ThreadPoolExecutor(min(8, len(files))) as pool:
                hashes = list(pool.map(file_sha256, files))
        except OSError as exc:
            raise StoreError(f"{exc.filename or directory}: cannot be read ({exc.strerror or exc})") from None
        if stamps is not None:
            stamps.update({p.relative_to(directory).as_posix(): stamp for p, stamp in stamped.items()})
        return cls(
            tuple(
                FileEntry(p.relative_to(directory).as_posix(), stamped[p][0], h)
                for p, h in zip(files, hashes, strict=True)
            )
        )

    def only(self, names: Iterable[str]) -> "Manifest":
        """The files named, and all in each folder named with a trailing `/`."""
        wanted = set(names)
        folders = tuple(name for name in wanted if name.endswith("/"))
        return Manifest(tuple(f for f in self.files if f.path in wanted or f.path.startswith(folders)))


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def _files_in(directory: Path) -> list[Path]:
    """The files to push, sorted; StoreError for anything else there but folders (names starting with '.' aside)."""
    found = []

    def unlisted(exc: OSError) -> None:  # a folder push may not list: refused, not left out (a review)
        raise StoreError(f"{exc.filename}: cannot be listed ({exc.strerror or exc})")

    for root, folders, names in os.walk(directory, onerror=unlisted):
        here = Path(root)
        folders[:] = [f for f in folders if not f.startswith(".")]
        for name in [*names, *folders]:
            path = here / name
            if name.startswith("."):
                continue
            if path.is_symlink() and path.is_dir():
                raise StoreError(f"{path}: a link to a folder, which push does not follow; copy the folder in")
            if name in folders:
                continue
            if not path.exists():
                raise StoreError(f"{path}: a link that leads nowhere (a download cut short?)")
            if not path.is_file():
                raise StoreError(f"{path}: not a file (a pipe, socket or device); push takes files")
            found.append(path)
    return sorted(found)


def file_stamp(path: Path) -> tuple[int, int]:
    """The file's size and modification time: what tells one written since."""
    try:
        st = path.stat()
    except OSError as exc:
        raise StoreError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return st.st_size, st.st_mtime_ns


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
